"""The head's silence floor ($YETO_SILENCE_FLOOR_S, docs/CONFIG.md): the launcher service reads it once at its start
(services/launcher/wiring.py) and its pace rule (services/launcher/liveness.py) preempts a fast frozen island just
after it instead of after the default 60 s; the pace and heartbeat_timeout_s still govern above it. A value that is
not a positive number of seconds is refused with a warning, and the default holds."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from yeto.infra.runner import Publish
from yeto.schemas.capacity import Capacity
from yeto.schemas.fleet import IslandPreempted, IslandRequested, IslandUp, RunLaunched, StopIsland
from yeto.schemas.training import LearnerProgress
from yeto.services.launcher import wiring
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.liveness import FLOOR_S, GAPS
from yeto.services.launcher.logic import decide
from yeto.services.launcher.state import evolve

pytestmark = pytest.mark.timeout(30)
T0 = datetime(2026, 12, 6, tzinfo=timezone.utc)
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 1.0}


def at(s: float, t0: datetime = T0) -> datetime:
    return t0 + timedelta(seconds=s)


def reported(every_s: float, *, step_time_s: float = 0.05, cap: float = 300.0, t0: datetime = T0) -> tuple[dict, float]:
    """A run launched at `t0` whose island 0 reported 10 times `every_s` apart; the time of its last report (s after
    `t0`)."""
    recipe = {"recipe_version": 2, "train": {"model": "m", "max_steps": 1000}, "timeouts": {"heartbeat_timeout_s": cap}}
    events = [RunLaunched(run_id="r1", fleet=[SPEC], recipe=recipe, ts=t0),
              IslandRequested(run_id="r1", island=0, generation=0, spec=SPEC, ts=t0),
              IslandUp(run_id="r1", island=0, generation=0, spec=SPEC, handle="100", ts=at(1, t0))]
    events += [LearnerProgress(run_id="r1", learner="island-0", generation=0, step=10 * (i + 1), loss=1.0, tokens=8,
                               tokens_per_s=1.0, step_time_s=step_time_s, lr=1e-3,
                               ts=at(10 + i * every_s, t0))
               for i in range(10)]
    return reduce(evolve, events, {}), 10 + 9 * every_s


def preempted(decide_fn, state: dict, t: float, t0: datetime = T0) -> str | None:
    out = [p.msg for p in decide_fn(state, None, at(t, t0)) if isinstance(p, Publish)]
    if not out:
        return None
    assert [type(m) for m in out] == [IslandPreempted, StopIsland], out
    return out[0].reason


@pytest.fixture
def floor_env(monkeypatch):
    def set_to(value: str | None):
        if value is None:
            monkeypatch.delenv("YETO_SILENCE_FLOOR_S", raising=False)
        else:
            monkeypatch.setenv("YETO_SILENCE_FLOOR_S", value)
    return set_to


def test_the_launcher_reads_its_floor_from_the_environment_and_defaults_to_60_s(floor_env):
    floor_env(None)
    assert wiring.silence_floor_s() == FLOOR_S == 60.0
    floor_env("20")
    assert wiring.silence_floor_s() == 20.0
    floor_env("7.5")
    assert wiring.silence_floor_s() == 7.5


@pytest.mark.parametrize("bad", ["", "soon", "0", "-5", "nan"])
def test_a_floor_that_is_not_a_positive_number_is_refused_aloud_and_the_default_holds(bad, floor_env, caplog):
    floor_env(bad)
    with caplog.at_level(logging.WARNING, logger=wiring.__name__):
        assert wiring.silence_floor_s() == FLOOR_S
    assert "YETO_SILENCE_FLOOR_S" in caplog.text and "not a positive number" in caplog.text, caplog.text


def test_the_launcher_service_preempts_a_fast_frozen_island_just_after_its_floor(floor_env):
    floor_env("20")
    wired = wiring.spec(Effects({}, "nats://127.0.0.1:4222"), capacity=Capacity(cpus=2, gpus=0)).decide
    t0 = datetime.now(timezone.utc)     # the service counts silence from its own start: the run begins after it
    state, last = reported(2.0, t0=t0)  # its pace 2.05 s: 8 paces are 16.4 s, under the floor
    assert preempted(wired, state, last + 20 - 1, t0) is None
    reason = preempted(wired, state, last + 20 + 1, t0)
    assert reason is not None and reason.startswith("no progress for 21s (bound 20s: ") and "at least 20s" in reason
    assert preempted(decide, state, last + 20 + 1, t0) is None, "a bare decide keeps the default floor"


def test_above_the_floor_the_pace_and_the_cap_still_govern():
    slow, last = reported(25.0, step_time_s=20.0)
    assert preempted(lambda *a: decide(*a, floor_s=20.0), slow, last + GAPS * 25.0 - 1) is None
    assert "8 x its pace 25.0s, at least 20s" in preempted(lambda *a: decide(*a, floor_s=20.0), slow, last + GAPS * 25.0 + 1)
    capped, last = reported(2.0, cap=10.0)
    assert "bound 10s" in preempted(lambda *a: decide(*a, floor_s=20.0), capped, last + 11)
