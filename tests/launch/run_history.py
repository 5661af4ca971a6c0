"""A rich run's events, built through the real schema models: islands replaced and dropped, heartbeats, a round,
a final cut from two syncer shards, an acknowledgement, the artifact, the end and the teardown."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from yeto.schemas.final import (
    ArtifactWritten,
    CheckpointMarkedFinal,
    FinalCutDone,
    FinalCutRequested,
    LearnerFinalAck,
    RunFinalized,
)
from yeto.schemas.fleet import (
    IslandDropped,
    IslandExited,
    IslandPreempted,
    IslandReplaced,
    IslandRequested,
    IslandStopped,
    IslandUp,
    RunLaunched,
)
from yeto.schemas.training import LearnerProgress, RoundMerged

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
SPEC = {"cloud": "aws", "gpu": "A100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True, "price_per_hour": 2.5}
RECIPE = {"train": {"model": "m", "max_steps": 50}, "limits": {"max_spend": 100.0, "max_tokens": None},
          "head_price_per_hour": 0.19, "recover_timeout_s": 60}
CUT_AT = 20   # rich_run()[CUT_AT] is the FinalCutRequested


class History:
    """Events of run `run_id`, timed in seconds after `t0`."""

    def __init__(self, run_id: str = "r1", t0: datetime = T0):
        self.run_id, self.t0 = run_id, t0

    def at(self, s: float) -> datetime:
        return self.t0 + timedelta(seconds=s)

    def island(self, cls, island: int, generation: int, t: float, **kw):
        return cls(run_id=self.run_id, island=island, generation=generation, spec=SPEC, price_per_hour=2.5, ts=self.at(t),
                   **kw)

    def progress(self, learner: str, generation: int, step: int, t: float):
        return LearnerProgress(run_id=self.run_id, learner=learner, generation=generation, step=step, loss=3.0 - step / 100,
                               tokens=step * 512, tokens_per_s=100.0, step_time_s=0.5, lr=1e-4, ts=self.at(t))


def rich_run(run_id: str = "r1", t0: datetime = T0) -> list:
    h, r = History(run_id, t0), run_id
    isl, at, cut = h.island, h.at, dict(run_id=r, snapshot_path="/s", num_shards=2)
    return [RunLaunched(run_id=r, fleet=[SPEC] * 3, recipe=RECIPE, ts=t0),
            *(isl(IslandRequested, i, 0, 0) for i in range(3)), *(isl(IslandUp, i, 0, 1, handle=f"h{i}") for i in range(3)),
            h.progress("island-0", 0, 10, 5), h.progress("island-1", 0, 12, 6), h.progress("l-outside", 0, 3, 6),
            RoundMerged(run_id=r, fragment=1, global_version=1, responders=["island-0"], weights=[1.0], staleness=[0],
                        tokens=512, grace_ms=1.0, quorum_ms=1.0, merge_ms=1.0, delta_norm=0.1, merge="rda", ts=at(7)),
            isl(IslandExited, 1, 0, 8, exit_code=None, detail="killed"), isl(IslandPreempted, 1, 0, 8, reason="killed"),
            isl(IslandRequested, 1, 1, 9), isl(IslandReplaced, 1, 1, 12, previous_generation=0, handle="h1b"),
            h.progress("island-1", 1, 15, 14), isl(IslandExited, 2, 0, 15, exit_code=3, detail="crash"),
            isl(IslandPreempted, 2, 0, 15, reason="crash"), isl(IslandRequested, 2, 1, 16),
            isl(IslandDropped, 2, 1, 80, reason="not back"),
            FinalCutRequested(run_id=r, reason="budget", detail="d", ts=at(90)),
            FinalCutDone(versions={0: 4}, sha256="a", shard=0, ts=at(91), **cut),
            FinalCutDone(versions={1: 5}, sha256="b", shard=1, ts=at(92), **cut),
            CheckpointMarkedFinal(run_id=r, versions={0: 4, 1: 5}, snapshot_path="/s", sha256="c", ts=at(93)),
            LearnerFinalAck(run_id=r, learner="island-0", versions={0: 4, 1: 5}, ts=at(94)),
            ArtifactWritten(run_id=r, output="/o", local_path="/o", artifact_kind="adapter", files=["a"],
                            manifest_sha256="m", ts=at(95)),
            RunFinalized(run_id=r, output="/o", manifest_sha256="m", reason="budget", spend_usd=1.0, ts=at(96)),
            isl(IslandStopped, 0, 0, 97), isl(IslandStopped, 1, 1, 97)]
