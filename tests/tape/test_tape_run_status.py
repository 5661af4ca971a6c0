"""`yeto status` lists a run as it shows it alone: the list (SQL) and the detail (the fold) agree run by run.

On a real DuckDB tape file (stack down) with a run in every phase of schemas/run_phase.py."""
from __future__ import annotations

import json

import pytest

from tape_events import at, scripted_run, write_tape
from yeto.cli.main import main
from yeto.schemas.final import FinalCutDone, FinalCutRequested, RunFailed, RunStopped
from yeto.schemas.run_phase import LAUNCHING, PHASE_OF
from yeto.schemas.training import LearnerProgress


def runs_in_every_phase() -> list:
    """Runs cut from the scripted one at each phase, plus ends and news after ends (the first end is final)."""
    demo = scripted_run("r-final")      # launched, islands up, rounds, a preemption, a cut, finalized at minute 60
    launching, running, finalizing = (scripted_run(r)[:n] for r, n in (("r-launch", 3), ("r-run", 10), ("r-cut", 14)))
    late_news = [LearnerProgress(id="r-cut-late", run_id="r-cut", source="learner", learner="island-0", step=30, loss=1.5,
                                 tokens=3000, tokens_per_s=1.0, step_time_s=1.0, lr=1e-4, ts=at(56))]  # still finalizing
    stopped = scripted_run("r-stop")[:8] + [
        RunStopped(id="r-stop-end", run_id="r-stop", source="cli", reason="yeto down --now", ts=at(20)),
        RunFailed(id="r-stop-fail", run_id="r-stop", source="finalizer", reason="later", ts=at(21))]
    failed = scripted_run("r-fail")[:12] + [
        RunFailed(id="r-fail-end", run_id="r-fail", source="finalizer", reason="island crash loop", ts=at(42)),
        FinalCutRequested(id="r-fail-cut", run_id="r-fail", source="finalizer", reason="max_steps", ts=at(43)),
        FinalCutDone(id="r-fail-done", run_id="r-fail", source="syncer", versions={0: 2}, snapshot_path="/s",
                     sha256="1" * 64, ts=at(44))]
    return demo + launching + running + finalizing + late_news + stopped + failed


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    return write_tape(tmp_path, runs_in_every_phase())


@pytest.fixture
def yeto_out(capsys):
    def run(state, *argv) -> str:
        assert main(["--state-dir", str(state), *argv]) == 0
        return capsys.readouterr().out
    return run


@pytest.mark.timeout(120)
def test_the_status_list_and_each_runs_detail_agree_on_every_run(state, yeto_out):
    listed = {row["run_id"]: row for row in json.loads(yeto_out(state, "status", "--json"))["runs"]}
    every_phase = {LAUNCHING} | {phase for _, phase in PHASE_OF.values()}
    assert {row["phase"] for row in listed.values()} == every_phase      # the tape has a run in each phase
    assert listed["r-stop"]["phase"] == "stopped" and listed["r-cut"]["phase"] == "finalizing"
    for run_id, row in listed.items():
        view = json.loads(yeto_out(state, "status", run_id, "--json"))
        steps = [learner["step"] for learner in view["learners"].values()]
        islands_up = sum(isl["meter"]["up_since"] is not None for isl in view["islands"])
        assert (row["phase"], row["rounds"], row["events"], row["step"], row["islands_up"]) == (
            view["phase"], view["rounds_merged"], view["num_events"], max(steps, default=None), islands_up), run_id
        assert row["started"] == view["launched_at"][:19].replace("T", " "), run_id
        if view["ended"]:       # an ended run's spend no longer depends on when each was asked
            assert row["spend_usd"] == pytest.approx(view["spend_usd"], abs=1e-4), run_id
        text = yeto_out(state, "status", run_id)
        assert text.startswith(f"run {run_id}: {row['phase']}"), text
