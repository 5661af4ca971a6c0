"""The finalizer's artifact writer imports its libraries while a run trains (services/finalizer/warm.py, writer.py):
which runs call for it, by kind, what a missing library does (a line; the write says what is missing where it needs
it), the writer process's session weight while it imports and while it writes, and a writer that died.
That a real finalizer does it during a run: tests/e2e/test_e2e_acceptance.py (its log line)."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from yeto.schemas.final import BuildArtifact
from yeto.schemas.run_view import RunView
from yeto.services.finalizer.state import FinalRun
from yeto.services.finalizer.warm import kinds_due
from yeto.services.finalizer.writer import MODULES, Writer, WriterError, group_nice, import_all


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


def test_a_library_that_is_not_installed_is_said_and_the_others_are_imported(caplog):
    with caplog.at_level(logging.WARNING):
        cpu_s = import_all(("json", "yeto_no_such_library", "csv"))
    assert cpu_s >= 0 and "yeto_no_such_library not imported" in caplog.text


async def test_the_writer_imports_at_the_lowest_session_weight_and_writes_at_the_normal_one(nats_server, run_id,
                                                                                             tmp_path):
    """The artifact writer is a process and session of its own (writer.py): while it imports, its session has the
    lowest weight and the finalizer's (here: this process's) is untouched; a write asked for gets the normal weight,
    and one asked for before the run's final state is in the streams comes back as a retry with the reason."""
    import os

    writer = Writer(nats_server.url, tmp_path)
    ours = group_nice(os.getpid())
    await writer._started()
    pid = writer.pid
    assert pid is not None and pid != os.getpid() and os.getsid(pid) == pid
    if ours is None:
        pytest.skip("no autogroup scheduling here (/proc/PID/autogroup)")
    assert group_nice(pid) == 19 and group_nice(os.getpid()) == ours
    assert await writer.warm("lm") > 0.5         # torch, transformers, peft: seconds of CPU
    assert group_nice(pid) == 19 and group_nice(os.getpid()) == ours
    cmd = BuildArtifact(run_id=run_id, recipe={}, versions={0: 1})
    with pytest.raises(WriterError, match="not in the streams yet.*no LayoutDeclared") as failed:
        await writer.write(cmd)
    assert failed.value.retry_s == 1.0 and group_nice(pid) == 0 and writer.pid == pid
    await writer.close()
    assert writer.pid is None and not Path(f"/proc/{pid}").exists()        # it ended at the end of its input, reaped


async def test_a_writer_that_died_says_so_and_a_new_one_is_started_for_the_next_request(nats_server, run_id, tmp_path):
    import os
    import signal

    writer = Writer(nats_server.url, tmp_path)
    await writer._started()
    first = writer.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    with pytest.raises(WriterError, match="exited with code -9"):
        await writer.warm("lm")
    with pytest.raises(WriterError, match="not in the streams yet"):
        await writer.write(BuildArtifact(run_id=run_id, recipe={}, versions={0: 1}))
    assert writer.pid not in (None, first)
    await writer.close()
