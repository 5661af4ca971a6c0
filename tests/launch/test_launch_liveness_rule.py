"""The launcher's silence rule (services/launcher/liveness.py), pure: an island that showed its pace is preempted a few
paces into a silence, never before the floor, never after heartbeat_timeout_s; before its first progress, or while
its next silence may be an evaluation or its final evaluation, the fixed timeouts govern. An evaluation's beats
(LearnerBeat) end a silence without saying the island trained."""
from __future__ import annotations

import inspect
from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from yeto.infra.runner import Publish
from yeto.learners.bus_client import NatsTransport
from yeto.schemas.capacity import Capacity
from yeto.schemas.fleet import IslandPreempted, IslandRequested, IslandUp, RunLaunched, StopIsland
from yeto.schemas.progress import LearnerBeat
from yeto.schemas.training import LearnerProgress
from yeto.services.launcher import wiring
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.liveness import FLOOR_S, GAPS, REPORT_EVERY_S
from yeto.services.launcher.logic import decide, silent_after
from yeto.services.launcher.state import evolve

pytestmark = pytest.mark.timeout(30)
T0 = datetime(2026, 12, 5, tzinfo=timezone.utc)
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 1.0}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def progress(step: int, t: float, *, step_time_s: float = 0.05, generation: int = 0, eval_loss: float | None = None):
    return LearnerProgress(run_id="r1", learner="island-0", generation=generation, step=step, loss=1.0, tokens=step * 8,
                           tokens_per_s=1.0, step_time_s=step_time_s, lr=1e-3, eval_loss=eval_loss, ts=at(t))


def eval_beat(step: int, t: float, done: int, *, total: int = 16, final: bool = True, generation: int = 0):
    return LearnerBeat(run_id="r1", learner="island-0", generation=generation, step=step, batches_done=done,
                       batches=total, final=final, ts=at(t))


def run_with(*beats, **train) -> dict:
    recipe = {"recipe_version": 2, "train": {"model": "m", "max_steps": 1000, **train.pop("train", {})}, **train}
    start = [RunLaunched(run_id="r1", fleet=[SPEC], recipe=recipe, ts=T0),
             IslandRequested(run_id="r1", island=0, generation=0, spec=SPEC, ts=T0),
             IslandUp(run_id="r1", island=0, generation=0, spec=SPEC, handle="100", ts=at(1))]
    return reduce(evolve, [*start, *beats], {})


def preempted_at(state: dict, t: float, heard_since: float | None = None) -> str | None:
    """The IslandPreempted reason the launcher's tick at `t` gives (None: nothing), with its StopIsland; `heard_since`:
    when the launcher started."""
    since = None if heard_since is None else at(heard_since)
    out = [p.msg for p in decide(state, None, at(t), heard_since=since) if isinstance(p, Publish)]
    if not out:
        return None
    assert [type(m) for m in out] == [IslandPreempted, StopIsland], out
    return out[0].reason


def fast(n: int = 10, every_s: float = 2.0, **kw) -> list:
    """`n` reports `every_s` apart, the last at 10 + (n - 1) * every_s."""
    return [progress(10 * (i + 1), 10 + i * every_s, **kw) for i in range(n)]


def test_a_fast_island_frozen_is_preempted_just_after_the_floor_not_after_heartbeat_timeout():
    state, last = run_with(*fast()), 10 + 9 * 2.0
    assert silent_after(state["r1"], state["r1"].islands[0]).seconds == FLOOR_S
    assert preempted_at(state, last + FLOOR_S) is None
    reason = preempted_at(state, last + FLOOR_S + 1)
    assert reason is not None and reason.startswith(f"no progress for {FLOOR_S + 1:.0f}s (bound {FLOOR_S:.0f}s: ")


def test_a_slow_island_gets_gaps_times_its_longest_interval_between_reports():
    beats = [progress(i + 1, 10 + 25.0 * i, step_time_s=20.0) for i in range(4)]
    state, last = run_with(*beats), 10 + 25.0 * 3
    assert silent_after(state["r1"], state["r1"].islands[0]).seconds == GAPS * 25.0 > FLOOR_S
    assert preempted_at(state, last + GAPS * 25.0 - 1) is None
    assert "8 x its pace 25.0s" in preempted_at(state, last + GAPS * 25.0 + 1)


def test_with_one_report_the_pace_is_the_report_interval_plus_its_step_time():
    state = run_with(progress(1, 10, step_time_s=30.0))
    assert silent_after(state["r1"], state["r1"].islands[0]).seconds == GAPS * (REPORT_EVERY_S + 30.0)


@pytest.mark.parametrize("cap, expected", [(30.0, 30.0), (300.0, 300.0)])
def test_heartbeat_timeout_s_caps_the_bound(cap, expected):
    beats = [progress(i + 1, 10 + 100.0 * i, step_time_s=90.0) for i in range(3)]     # 8 paces: 800 s
    state = run_with(*beats, timeouts={"heartbeat_timeout_s": cap})
    assert silent_after(state["r1"], state["r1"].islands[0]).seconds == expected
    assert preempted_at(state, 210 + expected - 1) is None and preempted_at(state, 210 + expected + 1)


def test_before_its_first_progress_an_island_is_given_startup_timeout_s():
    state = run_with()
    assert preempted_at(state, 1 + 1800 - 1) is None
    assert preempted_at(state, 1 + 1800 + 1) == "no progress 1801s after start"


def test_while_its_first_evaluation_may_be_next_heartbeat_timeout_s_governs_then_the_pace_with_the_evaluation():
    state = run_with(*fast(), train={"eval_every": 100})
    assert preempted_at(state, 28 + 299) is None and "no evaluated step" in preempted_at(state, 28 + 301)
    evaluated = reduce(evolve, [progress(110, 28 + 30, eval_loss=2.0)], state)     # the evaluation took ~28 s
    assert silent_after(evaluated["r1"], evaluated["r1"].islands[0]).seconds == GAPS * 30.0


def test_an_island_that_trained_to_max_steps_is_given_heartbeat_timeout_s_for_its_final_evaluation():
    state = run_with(*fast(), progress(1000, 30))
    assert preempted_at(state, 30 + 299) is None
    assert "trained to max_steps" in preempted_at(state, 30 + 301)


def test_a_final_evaluation_longer_than_heartbeat_timeout_s_is_not_preempted_while_its_batches_advance():
    """16 held-out batches of 40 s each after max_steps: 640 s of evaluation, more than twice the cap, every beat
    within it; once the beats stop (a hung batch), the cap counts from the last one."""
    beats = [eval_beat(1000, 30 + 40.0 * k, k) for k in range(1, 17)]
    state, last = run_with(*fast(), progress(1000, 30), *beats), 30 + 40.0 * 16
    for t in (30 + 40.0 * k + 39 for k in range(16)):
        assert preempted_at(reduce(evolve, [b for b in beats if b.ts <= at(t)], run_with(*fast(), progress(1000, 30))),
                            t) is None
    isl = state["r1"].islands[0]
    assert (isl.last_beat, isl.last_step, isl.beat_gap_s) == (at(last), 1000, 40.0)
    assert preempted_at(state, last + 299) is None
    assert "trained to max_steps" in preempted_at(state, last + 301)


def test_without_beats_the_same_evaluation_is_preempted_at_the_cap():
    state = run_with(*fast(), progress(1000, 30))
    assert "trained to max_steps" in preempted_at(state, 30 + 301)


def test_a_beat_says_nothing_of_steps_or_evaluated_and_an_old_generations_is_ignored():
    state = run_with(*fast(), train={"eval_every": 100})
    state = reduce(evolve, [eval_beat(100, 29, 3, final=False)], state)
    isl = state["r1"].islands[0]
    assert (isl.last_beat, isl.last_step, isl.evaluated) == (at(29), 100, False)
    old = reduce(evolve, [IslandRequested(run_id="r1", island=0, generation=1, spec=SPEC, ts=at(40)),
                          eval_beat(100, 45, 4, final=False, generation=0)], state)
    assert old["r1"].islands[0].last_beat is None


def test_a_replacement_starts_without_its_predecessors_pace():
    slow = [progress(i + 1, 10 + 25.0 * i, step_time_s=20.0) for i in range(4)]
    state = run_with(*slow)
    state = reduce(evolve, [IslandRequested(run_id="r1", island=0, generation=1, spec=SPEC, ts=at(400)),
                            progress(5, 420, generation=1), progress(15, 422, generation=1)], state)
    isl = state["r1"].islands[0]
    assert (isl.generation, isl.beat_gap_s) == (1, 2.0)
    assert reduce(evolve, [progress(9, 500, generation=0)], state)["r1"].islands[0].beat_gap_s == 2.0   # old news


def test_the_report_interval_the_rule_assumes_is_the_learners():
    assert inspect.signature(NatsTransport).parameters["progress_every_s"].default == REPORT_EVERY_S


def test_a_restarted_launcher_counts_an_islands_silence_from_its_own_start_at_the_earliest():
    state, last, back = run_with(*fast()), 10 + 9 * 2.0, 10 + 9 * 2.0 + 200     # the head was away 200 s
    assert preempted_at(state, back + FLOOR_S - 1, heard_since=back) is None    # the learners' reports come now
    reason = preempted_at(state, back + FLOOR_S + 1, heard_since=back)
    assert reason is not None and reason.startswith(f"no progress for {back + FLOOR_S + 1 - last:.0f}s (bound 60s")


def test_the_launcher_service_counts_silence_from_its_start_a_bare_decide_does_not():
    state, now = run_with(*fast()), datetime.now(timezone.utc)      # its last report hours before this test
    wired = wiring.spec(Effects({}, "nats://127.0.0.1:4222"), capacity=Capacity(cpus=2, gpus=0)).decide
    assert [p for p in wired(state, None, now) if isinstance(p, Publish)] == []
    assert [type(p.msg) for p in decide(state, None, now) if isinstance(p, Publish)] == [IslandPreempted, StopIsland]
