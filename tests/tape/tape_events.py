"""A scripted run's events, built through the real schema models, shared by the tape tests."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from yeto.schemas.final import FinalCutRequested, RunFinalized
from yeto.schemas.fleet import IslandPreempted, IslandReplaced, IslandRequested, IslandUp, RunLaunched
from yeto.schemas.training import LearnerProgress, RoundMerged

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
SPEC = {"cloud": "aws", "gpu": "a100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True}


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def scripted_run(run_id: str = "r-demo") -> list:
    """Two islands at $2/h and $3/h; island 1 is preempted at minute 30 and replaced at minute 40; finalized at 60."""
    isl = dict(run_id=run_id, source="launcher", spec=SPEC)
    round_ = dict(run_id=run_id, source="syncer", weights=[0.5, 0.5], staleness=[0, 0], tokens=100, grace_ms=10.0,
                  quorum_ms=5.0, merge_ms=1.0, delta_norm=0.1, merge="rda")
    prog = dict(run_id=run_id, source="learner", tokens_per_s=1.0, step_time_s=1.0, lr=1e-4)
    return [
        RunLaunched(id=f"{run_id}-launched", run_id=run_id, source="launcher", ts=at(0), fleet=[SPEC, SPEC],
                    recipe={"train": {"max_steps": 100}, "limits": {"max_spend": 10.0}}),
        IslandRequested(id=f"{run_id}-req0", island=0, ts=at(0), price_per_hour=2.0, **isl),
        IslandRequested(id=f"{run_id}-req1", island=1, ts=at(0), price_per_hour=3.0, **isl),
        IslandUp(id=f"{run_id}-up0", island=0, ts=at(0), price_per_hour=2.0, **isl),
        IslandUp(id=f"{run_id}-up1", island=1, ts=at(0), price_per_hour=3.0, **isl),
        LearnerProgress(id=f"{run_id}-p0", learner="island-0", step=10, loss=2.5, tokens=1000, ts=at(10), **prog),
        RoundMerged(id=f"{run_id}-m0", fragment=0, global_version=1, responders=["island-0", "island-1"], ts=at(12), **round_),
        RoundMerged(id=f"{run_id}-m1", fragment=1, global_version=1, responders=["island-0", "island-1"], ts=at(13), **round_),
        IslandPreempted(id=f"{run_id}-pre1", island=1, ts=at(30), price_per_hour=3.0, reason="spot reclaimed", **isl),
        LearnerProgress(id=f"{run_id}-p1", learner="island-1", step=20, loss=2.0, tokens=2000, ts=at(31), **prog),
        IslandReplaced(id=f"{run_id}-rep1", island=1, generation=1, previous_generation=0, ts=at(40), price_per_hour=3.0,
                       **isl),
        LearnerProgress(id=f"{run_id}-p2", learner="island-1", generation=1, step=5, loss=1.8, tokens=500, ts=at(45), **prog),
        RoundMerged(id=f"{run_id}-m2", fragment=0, global_version=2, responders=["island-0", "island-1"], ts=at(50), **round_),
        FinalCutRequested(id=f"{run_id}-cut", run_id=run_id, source="finalizer", reason="max_steps", ts=at(55)),
        RunFinalized(id=f"{run_id}-final", run_id=run_id, source="finalizer", output="/out", manifest_sha256="1" * 64,
                     reason="max_steps", spend_usd=4.5, ts=at(60)),
    ]


# Island 0: 60 min at $2/h = $2. Island 1: 30 min + 20 min at $3/h = $2.5.
SCRIPTED_SPEND = 4.5


def write_tape(state: Path, events: list) -> Path:
    """A state directory whose tape holds `events` (stream sequences 1..n), with no stack running."""
    from yeto.infra.stack import StackPaths
    from yeto.infra.tape.store import TapeStore
    from yeto.schemas.base import to_bytes

    store = TapeStore(StackPaths(state).db)
    store.append(list(range(1, len(events) + 1)), [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    store.close()
    return state
