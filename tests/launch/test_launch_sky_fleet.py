"""The launcher's decisions and effects over a SkyPilot fleet (a counting SkyApi double behind the protocol, a fake
clock): the watcher's job-queue reads per minute are bounded, a run that ends cancels every island's job by the id
its IslandUp recorded, and cloud islands are handed the run's public bus URL."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from sky_double import CountingSky, FakeClock
from yeto.infra.runner.spec import Publish
from yeto.schemas.commands import LaunchRun
from yeto.schemas.final import RunStopped
from yeto.schemas.fleet import IslandExited, StartIsland, StopIsland
from yeto.services.launcher.backends.skypilot import QUEUE_MAX_AGE_S, SkyPilotBackend
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.logic import Kill, Spawn, decide
from yeto.services.launcher.state import evolve

pytest.importorskip("sky")
pytestmark = pytest.mark.timeout(60)
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
AWS = {"cloud": "aws", "gpu": "A100", "count": 1, "nodes": 1, "region": None, "spot": True, "price_per_hour": 1.2}
LOCAL = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}
RECIPE = {"train": {"model": "m", "data": "org/chat"}, "bus_url": "tls://203.0.113.7:4222"}


def launched(fleet: list[dict], sky: CountingSky, clock: FakeClock) -> tuple[Effects, dict]:
    """The fleet launched through the launcher's own decisions and effects; the state folded from what they published."""
    effects = Effects({"skypilot": SkyPilotBackend(api=sky, clock=clock)}, "nats://127.0.0.1:4222")
    msgs = [i.msg for i in decide({}, LaunchRun(id="L", run_id="r1", fleet=fleet, recipe=RECIPE), T0)]
    msgs += [asyncio.run(effects.spawn(Spawn(m))) for m in msgs if isinstance(m, StartIsland) and m.spec["cloud"] != "local"]
    return effects, reduce(evolve, [m.model_copy(update={"ts": T0}) for m in msgs if not isinstance(m, StartIsland)], {})


def test_the_watcher_reads_the_job_queue_at_most_every_15_s_for_a_fleet_of_8():
    sky, clock = CountingSky(), FakeClock()
    effects, state = launched([AWS] * 8, sky, clock)
    assert sky.calls["jobs_launch"] == 8 and [i.handle for i in state["r1"].islands] == [str(100 + i) for i in range(8)]
    found = {}
    for second in range(60):                 # one watcher poll per second for a minute
        clock.t = float(second)
        if second == 20:
            sky.set_status(103, "RECOVERING")    # island 3 preempted
        for e in effects.exits(state):
            found.setdefault(e.island, (second, e))
    assert sky.calls["jobs_queue"] == 60 / QUEUE_MAX_AGE_S == 4     # at 0 (the launches' read), 15, 30, 45
    ((island, (second, exited)),) = found.items()
    assert island == 3 and second == 30 and exited.handle == "103" and exited.exit_code is None
    assert "preempted" in exited.detail


def test_a_preempted_cloud_island_is_replaced_and_its_old_job_cancelled_by_its_id():
    sky, clock = CountingSky(), FakeClock()
    effects, state = launched([AWS, AWS], sky, clock)
    exited = IslandExited(run_id="r1", island=1, generation=0, spec=AWS, handle="101", ts=T0 + timedelta(seconds=30))
    state = evolve(state, exited)
    out = [i.msg for i in decide(state, exited, exited.ts)]
    stop = next(m for m in out if isinstance(m, StopIsland))
    (kill,) = decide(state, stop, exited.ts)
    assert kill == Kill(stop, "101")
    asyncio.run(effects.kill(kill))
    assert sky.cancelled == [101]


def test_a_run_that_ends_cancels_every_islands_job_by_its_recorded_id():
    sky, clock = CountingSky(), FakeClock()
    effects, state = launched([AWS, AWS, AWS, LOCAL], sky, clock)
    state = evolve(state, RunStopped(run_id="r1", reason="user", ts=T0 + timedelta(seconds=60)))
    stops = [i.msg for i in decide(state, None, T0 + timedelta(seconds=61)) if isinstance(i, Publish)]
    assert [(type(m), m.island) for m in stops] == [(StopIsland, 0), (StopIsland, 1), (StopIsland, 2)]
    for stop in stops:
        for kill in decide(state, stop, T0 + timedelta(seconds=61)):
            asyncio.run(effects.kill(kill))
    assert sorted(sky.cancelled) == [100, 101, 102]


def test_cloud_islands_get_the_runs_public_bus_url_and_local_ones_the_launchers():
    sky, clock = CountingSky(), FakeClock()
    launched([AWS], sky, clock)
    assert sky.tasks[100].envs["YETO_NATS_URL"] == RECIPE["bus_url"]
    assert f"--nats-url {RECIPE['bus_url']}" in sky.tasks[100].run
