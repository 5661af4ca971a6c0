"""The finalizer imports its artifact writer's libraries while a run trains (services/finalizer/warm.py): which runs
call for it, by kind, and what a missing library does (a line; the write says what is missing where it needs it).
That a real finalizer does it during a run: tests/e2e/test_e2e_acceptance.py (its log line)."""
from __future__ import annotations

import logging

from yeto.schemas.run_view import RunView
from yeto.services.finalizer.state import FinalRun
from yeto.services.finalizer.warm import MODULES, import_all, kinds_due


def run(rounds: int, *, phase: str = "training", kind: str | None = None, ended: str = "") -> FinalRun:
    recipe = {"model_kind": kind} if kind else {}
    return FinalRun(view=RunView(run_id="r", recipe=recipe, rounds_merged=rounds, ended=ended), phase=phase)


def test_a_run_that_trains_and_has_merged_a_round_calls_for_its_kinds_libraries():
    assert kinds_due({}) == set()
    assert kinds_due({"a": run(0)}) == set()                      # its learners still starting: not yet
    assert kinds_due({"a": run(1)}) == {"lm"}
    assert kinds_due({"a": run(3, kind="diffusion"), "b": run(0)}) == {"diffusion"}
    assert kinds_due({"a": run(5, phase="cutting"), "b": run(5, ended="RunFinalized")}) == set()
    assert "diffusers" in MODULES["diffusion"] and "peft" in MODULES["lm"] and "torch" in MODULES["lm"]


def test_a_library_that_is_not_installed_is_said_and_the_others_are_imported_at_the_lowest_priority(caplog):
    import os
    import threading

    seen = {}

    def on_a_thread() -> None:
        with caplog.at_level(logging.WARNING):
            seen["cpu_s"] = import_all(("json", "yeto_no_such_library", "csv"))
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=on_a_thread)
    thread.start()
    thread.join(30)
    assert seen["cpu_s"] >= 0 and "yeto_no_such_library not imported" in caplog.text
    assert seen["nice"] == 19 and os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != 19   # its own thread
