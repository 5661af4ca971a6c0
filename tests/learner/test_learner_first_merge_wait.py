"""A learner does not run far ahead of a run that has merged nothing yet (SyncConfig.first_merge_wait_s): with two
pushes of a fragment out, neither answered, and that fragment's global still version 0, it waits at its step boundary
for the first merged version, up to the bound, once. On a fresh install the syncer's kernels took 22-42 s to compile
while learners trained on; the rounds then merged in one backlog set the run back (+13% held-out CE on wan.py,
benchmarks/results/wan/rebase-2026-12-06/). A learner that never heard a syncer (no version 0) never waits.
DilocoSync and DilocoHook with a simulated clock and a recording transport (tests/learner/test_learner_keyframes.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from yeto.learners.diloco_sync import FIRST_MERGE_AHEAD, DilocoSync
from yeto.learners.sync_hook import DilocoHook
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.broadcast import BroadcastShadow

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_learner_keyframes import Clock, DictArrays, Recorder, keyframes_of, values

WAIT_S = 5.0
CONFIG = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.0, first_merge_wait_s=WAIT_S)


class Sim:
    """One learner on a simulated clock: `sleep` advances it and, at `land_at`, the syncer's version 1 arrives."""

    def __init__(self, *, version0: bool, land_at: float | None = None, config: SyncConfig = CONFIG) -> None:
        self.clock = Clock()
        self.sync = DilocoSync(DictArrays(values(0)), config, run_id="r", learner="l0", clock=self.clock)
        self.shadow = BroadcastShadow(run_id="r", fingerprint=self.sync.fingerprint, keyframe_every=16, codec_down="q4")
        self.t = Recorder()
        self.land_at, self.sleeps = land_at, 0
        self.hook = DilocoHook(self.sync, self.t, join_wait_s=0.0, sends_init=False, clock=self.clock, sleep=self.sleep)
        if version0:       # the syncer's version 0 (the learner's own values): announced, adopted by checksum
            self.t.inbox = [(h, None) for h, _ in keyframes_of(self.sync, self.shadow, 0,
                                                               {p: self.sync.anchors[p] for p in self.sync.active})]
        self.hook.join()

    def sleep(self, s: float) -> None:
        self.sleeps += 1
        self.clock.t += s
        if self.land_at is not None and self.clock.t >= self.land_at:
            self.land_at = None
            thetas = {p: self.sync.anchors[p] + 0.01 for p in self.sync.active}
            for h, payload in keyframes_of(self.sync, self.shadow, 1, thetas):
                self.t.inbox += split_chunks(h, payload, 256)

    def steps(self, n: int, step_s: float = 0.1) -> list[float]:
        """Train n steps of step_s each; the clock after each step boundary."""
        at = []
        for step in range(1, n + 1):
            self.clock.t += step_s
            self.hook.after_step(step, 100)
            at.append(self.clock.t)
        return at


def pushes_of(t: Recorder, p: int) -> int:
    return sum(1 for h in t.pushes if h.kind == "push" and h.fragment == p)


def test_with_two_pushes_out_and_nothing_merged_the_learner_waits_for_the_first_merged_version():
    sim = Sim(version0=True, land_at=3.0)
    assert all(v == 0 for v in sim.sync.versions.values())
    at = sim.steps(12)
    waited = [b - a for a, b in zip([0.0, *at], at) if b - a > 0.1 + 1e-9]
    assert len(waited) == 1, f"one wait, for version 1: {at}"
    assert 2.0 < waited[0] < 3.0 + 0.1, "until version 1 landed at t = 3 s, not the whole bound"
    assert all(v == 1 for v in sim.sync.versions.values()), sim.sync.versions
    assert sim.hook.first_merge_waited_s == pytest.approx(waited[0] - 0.0, abs=0.11)
    assert max(pushes_of(sim.t, p) for p in sim.sync.active) >= FIRST_MERGE_AHEAD
    assert sim.hook.first_merge_wait_s == WAIT_S, "a wait that ended with a merge keeps the bound"


def test_a_syncer_that_never_merges_costs_one_bound_then_the_learner_trains_on(capsys):
    sim = Sim(version0=True)
    at = sim.steps(40)
    long = [b - a for a, b in zip([0.0, *at], at) if b - a > 0.1 + 1e-9]
    assert len(long) == 1 and WAIT_S <= long[0] < WAIT_S + 0.2, f"one wait of the bound: {long}"
    assert sim.hook.first_merge_wait_s == 0.0
    assert "no round merged 5s after two pushes" in capsys.readouterr().err
    assert pushes_of(sim.t, 0) >= 8, "it trained and pushed on"


def test_a_learner_that_heard_no_syncer_never_waits():
    sim = Sim(version0=False)
    assert all(v is None for v in sim.sync.versions.values())
    at = sim.steps(40)
    assert at[-1] == pytest.approx(40 * 0.1) and sim.hook.first_merge_waited_s == 0.0


def test_zero_turns_the_wait_off_and_a_negative_bound_is_refused():
    sim = Sim(version0=True, config=SyncConfig(num_fragments=2, inner_steps=4, alpha=0.0, first_merge_wait_s=0.0))
    at = sim.steps(40)
    assert at[-1] == pytest.approx(40 * 0.1) and sim.hook.first_merge_waited_s == 0.0
    with pytest.raises(ValueError, match="first_merge_wait_s must be >= 0"):
        SyncConfig(first_merge_wait_s=-1.0)
