"""The launcher's pure decisions: launch, replacement of a dead island, drop after --recover-timeout, teardown."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from yeto.infra.runner import Publish
from yeto.schemas.commands import LaunchRun
from yeto.schemas.final import RunFinalized
from yeto.schemas.fleet import (
    IslandDropped,
    IslandExited,
    IslandPreempted,
    IslandReplaced,
    IslandRequested,
    IslandUp,
    RunLaunched,
    StartIsland,
    StopIsland,
)
from yeto.schemas.training import LearnerProgress
from yeto.services.launcher.logic import Spawn, decide
from yeto.services.launcher.state import evolve

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}
RECIPE = {"train": {"model": "m"}, "recover_timeout_s": 60}
LAUNCH = LaunchRun(id="L", run_id="r1", fleet=[SPEC, SPEC], recipe=RECIPE)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def published(intents) -> list:
    return [i.msg for i in intents if isinstance(i, Publish)]


def fold(events) -> dict:
    return reduce(evolve, events, {})


def isl(cls, island=0, generation=0, t=0.0, **kw):
    return cls(run_id="r1", island=island, generation=generation, spec=SPEC, ts=at(t), **kw)


def launched_and_up() -> list:
    return [published(decide({}, LAUNCH, T0))[0].model_copy(update={"ts": T0}),
            isl(IslandUp, 0, handle="100"), isl(IslandUp, 1, handle="200")]


def test_launch_publishes_run_launched_then_a_start_and_a_request_per_island():
    msgs = published(decide({}, LAUNCH, T0))
    assert [type(m) for m in msgs] == [RunLaunched, StartIsland, IslandRequested, StartIsland, IslandRequested]
    assert [(m.island, m.generation) for m in msgs if isinstance(m, StartIsland)] == [(0, 0), (1, 0)]
    assert [m.id for m in msgs] == [m.id for m in published(decide({}, LAUNCH, at(5)))]   # redelivery: same ids


def test_start_island_is_spawned_unless_a_newer_generation_exists():
    state = fold(launched_and_up() + [isl(IslandExited, 0, t=5, exit_code=None), isl(IslandPreempted, 0, t=5, reason="x"),
                                      isl(IslandRequested, 0, 1, t=5)])
    old = StartIsland(run_id="r1", island=0, generation=0, spec=SPEC, recipe=RECIPE, num_islands=2)
    new = old.model_copy(update={"generation": 1})
    assert decide(state, old, at(6)) == []
    assert decide(state, new, at(6)) == [Spawn(new)]


def test_a_killed_island_is_preempted_then_its_next_generation_started():
    beat = LearnerProgress(run_id="r1", learner="island-0", step=3, loss=1.0, tokens=10, tokens_per_s=1,
                           step_time_s=1, lr=1e-3, ts=at(2))
    events = launched_and_up() + [beat]
    exited = isl(IslandExited, 0, t=10, exit_code=None, detail="killed")
    out = published(decide(fold(events + [exited]), exited, at(10)))
    assert [(type(m), m.island, m.generation) for m in out] == [(IslandPreempted, 0, 0)]
    preempted = out[0].model_copy(update={"ts": at(10)})
    out = published(decide(fold(events + [exited, preempted]), preempted, at(10)))
    assert [(type(m), m.island, m.generation) for m in out] == [(StartIsland, 0, 1), (IslandRequested, 0, 1)]
    assert out[0].start_step == 3            # the replacement resumes where its predecessor last reported


def test_start_island_v1_is_upcast_to_start_from_step_zero():
    from yeto.schemas import parse

    v1 = {"type": "StartIsland", "version": 1, "run_id": "r1", "island": 0, "generation": 0, "spec": SPEC,
          "recipe": RECIPE, "num_islands": 2}
    msg = parse(v1)
    assert isinstance(msg, StartIsland) and msg.version == 2 and msg.start_step == 0


def test_an_island_not_back_within_recover_timeout_is_dropped_and_stopped():
    events = launched_and_up() + [isl(IslandExited, 0, t=5, exit_code=1), isl(IslandPreempted, 0, t=5, reason="x"),
                                  isl(IslandRequested, 0, 1, t=5)]
    state = fold(events)
    assert published(decide(state, None, at(64))) == []
    out = published(decide(state, None, at(66)))
    assert [(type(m), m.generation) for m in out] == [(IslandDropped, 1), (StopIsland, 1)]
    assert "--recover-timeout 60s" in out[0].reason


def test_a_replacement_that_comes_back_is_up_again_and_not_dropped():
    events = launched_and_up() + [isl(IslandExited, 0, t=5, exit_code=1), isl(IslandPreempted, 0, t=5, reason="x"),
                                  isl(IslandRequested, 0, 1, t=5), isl(IslandReplaced, 0, 1, t=20, previous_generation=0)]
    state = fold(events)
    assert state["r1"].islands[0].phase == "up" and state["r1"].islands[0].generation == 1
    assert published(decide(state, None, at(100))) == []


def test_an_island_that_keeps_crashing_before_progress_is_dropped():
    events = launched_and_up()
    for gen in range(3):
        t = gen * 10
        events += [isl(IslandExited, 0, gen, t=t + 1, exit_code=2), isl(IslandPreempted, 0, gen, t=t + 1, reason="x"),
                   isl(IslandRequested, 0, gen + 1, t=t + 2), isl(IslandReplaced, 0, gen + 1, t=t + 3, previous_generation=gen)]
    events += [isl(IslandExited, 0, 3, t=40, exit_code=2), isl(IslandPreempted, 0, 3, t=40, reason="x")]
    out = published(decide(fold(events[:-2]), None, at(40)))
    assert out == []
    state = fold(events)
    assert state["r1"].islands[0].crashes == 4
    assert [type(m) for m in published(decide(state, None, at(41)))] == [IslandDropped]


def test_an_island_that_finished_its_steps_is_not_replaced():
    state = fold(launched_and_up() + [isl(IslandExited, 0, t=9, exit_code=0)])
    assert state["r1"].islands[0].phase == "finished"
    assert published(decide(state, None, at(10))) == []


def test_after_the_run_ends_every_island_still_up_is_stopped_once():
    end = RunFinalized(run_id="r1", output="o", manifest_sha256="h", reason="max_steps", spend_usd=0, ts=at(10))
    state = fold(launched_and_up() + [isl(IslandExited, 1, t=9, exit_code=0), end])
    out = published(decide(state, None, at(11)))
    assert [(type(m), m.island) for m in out] == [(StopIsland, 0)]
    assert out[0].id == published(decide(state, None, at(99)))[0].id


def test_a_launch_over_the_launchers_capacity_is_rejected_before_anything_is_published():
    from yeto.infra.runner import Reject
    from yeto.schemas.capacity import Capacity

    small = Capacity(cpus=1, gpus=0, max_islands=8)
    with pytest.raises(Reject, match="2 CPU learner processes and this machine has 1 CPUs"):
        decide({}, LAUNCH, T0, capacity=small)
    with pytest.raises(Reject, match="2 islands is more than the cap of 1"):
        decide({}, LAUNCH, T0, capacity=Capacity(cpus=4, gpus=0, max_islands=1))
    assert len(published(decide({}, LAUNCH, T0, capacity=Capacity(cpus=2, gpus=0)))) == 5
