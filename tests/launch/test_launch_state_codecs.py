"""The launcher's and the finalizer's snapshot codecs: JSON that loads back to an equal state after every event of
a rich run (replacements, drops, heartbeats, a sharded final cut, acks, the artifact, the end), and decides alike."""
from __future__ import annotations

import json
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from run_history import RECIPE, SPEC, T0, History, rich_run
from yeto.schemas.fleet import (
    IslandDropped,
    IslandExited,
    IslandPreempted,
    IslandRequested,
    IslandStopped,
    IslandUp,
    RunLaunched,
)
from yeto.schemas.training import LearnerProgress
from yeto.services.finalizer import state as finalizer
from yeto.services.finalizer.logic import make_decide
from yeto.services.launcher import state as launcher
from yeto.services.launcher.logic import decide as launcher_decide

H = History()
at, isl, progress = H.at, H.island, H.progress


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
