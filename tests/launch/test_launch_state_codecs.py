"""The launcher's and the finalizer's snapshot codecs: JSON that loads back to an equal state after every event of
a rich run (replacements, drops, heartbeats, a sharded final cut, acks, the artifact, the end), and decides alike."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from yeto.services.finalizer import state as finalizer
from yeto.services.finalizer.logic import make_decide
from yeto.services.launcher import state as launcher
from yeto.services.launcher.logic import decide as launcher_decide

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
SPEC = {"cloud": "aws", "gpu": "A100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True, "price_per_hour": 2.5}
RECIPE = {"train": {"model": "m", "max_steps": 50}, "limits": {"max_spend": 100.0, "max_tokens": None},
          "head_price_per_hour": 0.19, "recover_timeout_s": 60}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def isl(cls, island: int, generation: int, t: float, **kw):
    return cls(run_id="r1", island=island, generation=generation, spec=SPEC, price_per_hour=2.5, ts=at(t), **kw)


def progress(learner: str, generation: int, step: int, t: float):
    return LearnerProgress(run_id="r1", learner=learner, generation=generation, step=step, loss=3.0 - step / 100,
                           tokens=step * 512, tokens_per_s=100.0, step_time_s=0.5, lr=1e-4, ts=at(t))


def rich_run() -> list:
    cut = dict(run_id="r1", snapshot_path="/s", num_shards=2)
    return [RunLaunched(run_id="r1", fleet=[SPEC] * 3, recipe=RECIPE, ts=T0),
            *(isl(IslandRequested, i, 0, 0) for i in range(3)), *(isl(IslandUp, i, 0, 1, handle=f"h{i}") for i in range(3)),
            progress("island-0", 0, 10, 5), progress("island-1", 0, 12, 6), progress("l-outside", 0, 3, 6),
            RoundMerged(run_id="r1", fragment=1, global_version=1, responders=["island-0"], weights=[1.0], staleness=[0],
                        tokens=512, grace_ms=1.0, quorum_ms=1.0, merge_ms=1.0, delta_norm=0.1, merge="rda", ts=at(7)),
            isl(IslandExited, 1, 0, 8, exit_code=None, detail="killed"), isl(IslandPreempted, 1, 0, 8, reason="killed"),
            isl(IslandRequested, 1, 1, 9), isl(IslandReplaced, 1, 1, 12, previous_generation=0, handle="h1b"),
            progress("island-1", 1, 15, 14), isl(IslandExited, 2, 0, 15, exit_code=3, detail="crash"),
            isl(IslandPreempted, 2, 0, 15, reason="crash"), isl(IslandRequested, 2, 1, 16),
            isl(IslandDropped, 2, 1, 80, reason="not back"),
            FinalCutRequested(run_id="r1", reason="budget", detail="d", ts=at(90)),
            FinalCutDone(versions={0: 4}, sha256="a", shard=0, ts=at(91), **cut),
            FinalCutDone(versions={1: 5}, sha256="b", shard=1, ts=at(92), **cut),
            CheckpointMarkedFinal(run_id="r1", versions={0: 4, 1: 5}, snapshot_path="/s", sha256="c", ts=at(93)),
            LearnerFinalAck(run_id="r1", learner="island-0", versions={0: 4, 1: 5}, ts=at(94)),
            ArtifactWritten(run_id="r1", output="/o", local_path="/o", artifact_kind="adapter", files=["a"],
                            manifest_sha256="m", ts=at(95)),
            RunFinalized(run_id="r1", output="/o", manifest_sha256="m", reason="budget", spend_usd=1.0, ts=at(96)),
            isl(IslandStopped, 0, 0, 97), isl(IslandStopped, 1, 1, 97)]


@pytest.mark.parametrize("service", [launcher, finalizer], ids=["launcher", "finalizer"])
def test_every_state_of_a_rich_run_round_trips_exactly_as_json(service):
    state = {}
    for event in rich_run():
        state = service.evolve(state, event)
        data = service.dump(state)
        assert service.load(data) == state, f"after {event.type}"
        json.loads(data)                                  # plain JSON: nothing a reader needs Python to open
    assert state["r1"].phase == "finalized" if service is finalizer else state["r1"].ended == "RunFinalized"


def intents(out: list) -> list:
    """Decisions without the time each message was created at."""
    return [i.msg.model_dump(exclude={"ts"}) if hasattr(i, "msg") else i for i in out]


def test_a_loaded_state_decides_what_the_folded_one_decides():
    events = rich_run()
    decide, decided = make_decide(5.0), []
    for n in (4, 12, 20, 22, 24):
        for service, dec in ((launcher, launcher_decide), (finalizer, decide)):
            state = reduce(service.evolve, events[:n], {})
            decided.append(intents(dec(state, None, at(200))))
            assert intents(dec(service.load(service.dump(state)), None, at(200))) == decided[-1]
    assert {m["type"] for out in decided for m in out} >= {"IslandPreempted", "BuildArtifact", "StopIsland"}


def test_a_snapshot_of_another_shape_is_refused_not_misread():
    with pytest.raises(ValueError):
        launcher.load(b'{"r1": {"run_id": "r1", "islands": "not islands"}}')
    with pytest.raises(ValueError):
        finalizer.load(b"not json")


EVENTS = st.tuples(st.sampled_from([IslandUp, IslandExited, IslandPreempted, IslandDropped, IslandStopped,
                                    IslandRequested, LearnerProgress]),
                   st.integers(0, 1), st.integers(0, 2), st.integers(0, 30))


@settings(max_examples=30, deadline=None)
@given(st.lists(EVENTS, max_size=12))
def test_any_island_history_round_trips(moves):
    events, t = [RunLaunched(run_id="r1", fleet=[SPEC] * 2, recipe=RECIPE, ts=T0)], 0.0
    for cls, i, gen, dt in moves:
        t += dt
        extra = {"reason": "x"} if cls in (IslandPreempted, IslandDropped) else {}
        events.append(progress(f"island-{i}", gen, int(t), t) if cls is LearnerProgress else isl(cls, i, gen, t, **extra))
    for service in (launcher, finalizer):
        state = reduce(service.evolve, events, {})
        assert service.load(service.dump(state)) == state
