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
from yeto.services.launcher.logic import Kill, Spawn, decide
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


CLOUD = {**SPEC, "cloud": "aws", "gpu": "A100", "spot": True}


def cloud_launched(*fleet: dict) -> RunLaunched:
    cmd = LaunchRun(id="L", run_id="r1", fleet=list(fleet), recipe={**RECIPE, "bus_url": "tls://203.0.113.7:4222"})
    return published(decide({}, cmd, T0))[0].model_copy(update={"ts": T0})


@pytest.mark.parametrize("bus_url, why", [("", "no bus URL"), ("tls://127.0.0.1:4222", "loopback"),
                                          ("nats://localhost:4222", "loopback"), ("tls://[::1]:4222", "loopback"),
                                          ("tls://0.0.0.0:4222", "loopback")])
def test_a_cloud_island_without_a_reachable_bus_url_ends_dropped_with_the_reason_and_is_never_started(bus_url, why):
    cmd = LaunchRun(id="L", run_id="r1", fleet=[CLOUD, SPEC], recipe={**RECIPE, "bus_url": bus_url})
    msgs = published(decide({}, cmd, T0))
    assert [(type(m), getattr(m, "island", None)) for m in msgs] == [
        (RunLaunched, None), (IslandDropped, 0), (StartIsland, 1), (IslandRequested, 1)]     # the local island starts
    assert why in msgs[1].reason and "yeto launch" in msgs[1].reason
    state = fold([m.model_copy(update={"ts": T0}) for m in msgs if not isinstance(m, StartIsland)])
    assert state["r1"].islands[0].phase == "dropped"
    assert published(decide(state, None, at(3600))) == []                                  # no retry, ever


def test_a_cloud_island_with_the_heads_public_url_is_started():
    cmd = LaunchRun(id="L", run_id="r1", fleet=[CLOUD], recipe={**RECIPE, "bus_url": "tls://203.0.113.7:4222"})
    assert [type(m) for m in published(decide({}, cmd, T0))] == [RunLaunched, StartIsland, IslandRequested]


def test_stop_island_is_killed_with_the_handle_its_island_up_recorded():
    state = fold(launched_and_up())
    stop = StopIsland(run_id="r1", island=1, generation=0, spec=SPEC, reason="user")
    assert decide(state, stop, at(1)) == [Kill(stop, "200")]


def test_a_generation_whose_start_is_not_recorded_is_killed_without_the_previous_generations_handle():
    state = fold(launched_and_up() + [isl(IslandExited, 0, t=5, exit_code=1), isl(IslandPreempted, 0, t=5, reason="x"),
                                      isl(IslandRequested, 0, 1, t=5)])
    assert state["r1"].islands[0].handle == "100"          # generation 0's, still in the view while 1 is replacing
    stop = StopIsland(run_id="r1", island=0, generation=1, spec=SPEC, reason="dropped")
    assert decide(state, stop, at(6)) == [Kill(stop, "")]


def test_a_cloud_island_that_exits_is_preempted_and_its_job_cancelled_a_local_one_only_preempted():
    events = [cloud_launched(CLOUD, SPEC), IslandUp(run_id="r1", island=0, spec=CLOUD, handle="7", ts=T0),
              isl(IslandUp, 1, handle="300")]
    events += [IslandExited(run_id="r1", island=0, spec=CLOUD, handle="7", ts=at(9)), isl(IslandExited, 1, t=9)]
    out = published(decide(fold(events), None, at(10)))
    assert [(type(m), m.island) for m in out] == [(IslandPreempted, 0), (StopIsland, 0), (IslandPreempted, 1)]


def test_a_run_that_ends_stops_a_cloud_island_that_exited_during_the_final_cut():
    from yeto.schemas.final import FinalCutRequested

    events = [cloud_launched(CLOUD), IslandUp(run_id="r1", island=0, spec=CLOUD, handle="7", ts=T0)]
    cut = FinalCutRequested(run_id="r1", reason="max_steps", ts=at(5))
    exited = IslandExited(run_id="r1", island=0, spec=CLOUD, handle="7", ts=at(6))
    assert published(decide(fold(events + [cut, exited]), None, at(7))) == []      # no replacement during the cut
    end = RunFinalized(run_id="r1", output="o", manifest_sha256="h", reason="max_steps", spend_usd=0, ts=at(10))
    (stop,) = published(decide(fold(events + [cut, exited, end]), None, at(11)))
    assert isinstance(stop, StopIsland) and decide(fold(events + [cut, exited, end]), stop, at(11)) == [Kill(stop, "7")]


def test_a_replacing_island_stopped_at_the_runs_end_is_stopped_and_not_asked_again():
    from yeto.schemas.fleet import IslandStopped

    replacing = launched_and_up() + [isl(IslandExited, 0, t=5, exit_code=1), isl(IslandPreempted, 0, t=5, reason="x"),
                                     isl(IslandRequested, 0, 1, t=5)]
    old_stop = isl(IslandStopped, 0, 0, t=6, handle="100", reason="preempted")      # the previous generation's stop
    assert fold(replacing + [old_stop])["r1"].islands[0].phase == "replacing"      # ... does not end the replacement
    end = RunFinalized(run_id="r1", output="o", manifest_sha256="h", reason="max_steps", spend_usd=0, ts=at(10))
    out = published(decide(fold(replacing + [old_stop, end]), None, at(11)))
    assert [(type(m), m.island, m.generation) for m in out] == [(StopIsland, 0, 1), (StopIsland, 1, 0)]
    stopped = [isl(IslandStopped, m.island, m.generation, t=12, handle="", reason=m.reason) for m in out]
    state = fold(replacing + [old_stop, end, *stopped])
    assert [(i.phase, i.handle) for i in state["r1"].islands] == [("stopped", ""), ("stopped", "200")]
    assert published(decide(state, None, at(13))) == published(decide(state, None, at(600))) == []
