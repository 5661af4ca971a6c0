"""push_schedule = global: learners that run out of phase push each fragment together again after one answered round."""
from __future__ import annotations

import numpy as np
import pytest

from dict_arrays import Arrays
from yeto.learners.diloco_sync import DilocoSync
from yeto.schemas import codecs
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.broadcast import BroadcastShadow


def run_two(schedule: str, ahead: int, ticks: int = 200) -> dict[str, dict[int, list[int]]]:
    """Two learners stepping in lockstep, `a` `ahead` steps ahead of `b` (it started earlier); a syncer that merges a
    fragment once both pushed it (the quorum of two) and broadcasts, the global landing on both at the next tick.
    Returns the tick of every push, per learner and fragment."""
    cfg = SyncConfig(num_fragments=2, inner_steps=12, codec_up="f32", codec_down="f32", push_schedule=schedule)
    rng = np.random.default_rng(0)
    start = {"a": rng.standard_normal(64).astype(np.float32), "b": None}
    start["b"] = start["a"].copy()
    syncs = {m: DilocoSync(Arrays(w=start[m].copy(), v=start[m][:32].copy()), cfg, run_id="r", learner=m) for m in "ab"}
    shadow = BroadcastShadow(run_id="r", fingerprint=syncs["a"].fingerprint, keyframe_every=1000, codec_down="f32")
    theta = {p: syncs["a"]._flat(p) for p in syncs["a"].active}
    for p, values in theta.items():                     # version 0 on both (as the syncer adopts an init push)
        for sync in syncs.values():
            for h, payload in shadow.publish(p, 0, values):
                for chunk in split_chunks(h, payload, 1 << 20):
                    sync.offer(*chunk)
    version, pending, landing = dict.fromkeys(theta, 0), {p: {} for p in theta}, []
    got: dict[str, dict[int, list[int]]] = {m: {p: [] for p in theta} for m in "ab"}
    for tick in range(-ahead, ticks):
        for msgs in landing:
            for sync in syncs.values():
                for h, payload in msgs:
                    for chunk in split_chunks(h, payload, 1 << 20):
                        sync.offer(*chunk)
        landing = []
        for m, sync in syncs.items():
            step = tick + (ahead if m == "a" else 0) + 1
            if step < 1:                                  # b has not started yet
                continue
            for name in sync.arrays.names():             # a "training" step
                sync.arrays.write(name, sync.arrays.read(name) - 0.01 * np.sign(sync.arrays.read(name)))
            for push in sync.after_step(step, tokens=10):
                p = push.header.fragment
                got[m][p].append(tick)
                pending[p][m] = codecs.F32.decode(push.payload, push.header.numel)
                if len(pending[p]) == 2:                  # the quorum: both pushed; merge and broadcast
                    theta[p] = theta[p] + sum(pending[p].values()) / 2
                    version[p] += 1
                    landing.append(shadow.publish(p, version[p], theta[p]))
                    pending[p] = {}
    return got


def gaps(got: dict[str, dict[int, list[int]]], p: int) -> list[int]:
    """Ticks between a's and b's k-th push of fragment p, for each round both pushed."""
    return [tb - ta for ta, tb in zip(got["a"][p], got["b"][p])]


def test_the_fixed_schedule_keeps_a_learner_that_started_ahead_out_of_phase():
    got = run_two("steps", ahead=5)
    for p in (0, 1):
        assert set(gaps(got, p)) == {5}


@pytest.mark.parametrize("ahead", [0, 1, 5, 9])
def test_the_global_schedule_pushes_a_fragment_together_after_its_first_answered_round(ahead):
    got = run_two("global", ahead=ahead)
    for p in (0, 1):
        g = gaps(got, p)
        assert g[0] == ahead and len(g) >= 8
        assert all(0 <= x <= 1 for x in g[1:]), g                     # a's push waits for the global, as b's does
        period = [b - a for a, b in zip(got["b"][p][1:], got["b"][p][2:])]
        assert set(period) <= {12, 13}                                   # about H: the round trip costs b no more than a step


def test_an_unknown_push_schedule_is_refused():
    with pytest.raises(ValueError, match="push_schedule"):
        SyncConfig(push_schedule="wall")
