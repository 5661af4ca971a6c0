"""Deterministic fragmenting, the layout fingerprint, the streaming push schedule and in-order globals."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from dict_arrays import Arrays
from yeto.learners.diloco_sync import DilocoSync, push_steps
from yeto.learners.layout import TensorSpec, plan_layout
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.broadcast import BroadcastShadow

TENSORS = [TensorSpec(f"model.layers.{i}.self_attn.q_proj.lora_{ab}.weight", (8, 64) if ab == "A" else (64, 8), "float32")
           for i in range(6) for ab in "AB"] + [
    TensorSpec("model.embed_tokens.weight", (100, 64), "float32"), TensorSpec("lm_head.weight", (100, 64), "float32"),
    TensorSpec("model.norm.weight", (64,), "float32"), TensorSpec("score.bias", (3,), "float32")]


def test_fragmenting_is_strided_by_layer_with_embeddings_apart_and_order_independent():
    layout = plan_layout(TENSORS, 4)
    shuffled = list(TENSORS)
    random.Random(1).shuffle(shuffled)
    assert plan_layout(shuffled, 4) == layout
    names = [[t.name for t in frag] for frag in layout.fragments]
    assert names[3] == ["lm_head.weight", "model.embed_tokens.weight"] and layout.roles[3] == "embed"
    for p in range(3):
        layers = {int(n.split(".")[2]) for n in names[p] if ".layers." in n}
        assert layers == {p, p + 3}
    loose = [p for p in range(3) if "model.norm.weight" in names[p] or "score.bias" in names[p]]
    assert len(loose) >= 1 and all(names[p] == sorted(names[p]) for p in range(4))


def test_fingerprint_changes_with_layout():
    base = plan_layout(TENSORS, 4).fingerprint
    assert plan_layout(TENSORS, 4).fingerprint == base
    assert plan_layout(TENSORS, 5).fingerprint != base
    assert plan_layout(TENSORS[:-1], 4).fingerprint != base
    assert plan_layout([TensorSpec(t.name, t.shape, "bfloat16") for t in TENSORS], 4).fingerprint != base
    assert plan_layout([TensorSpec(t.name, t.shape[::-1], t.dtype) for t in TENSORS], 4).fingerprint != base


def steps_until(fragment: int, cfg: SyncConfig, last: int) -> list[int]:
    return list(itertools.takewhile(lambda s: s <= last, push_steps(fragment, cfg)))


def test_push_schedule_is_every_h_steps_at_offset_p_h_over_p():
    cfg = SyncConfig(num_fragments=8, inner_steps=24)
    due = {p: steps_until(p, cfg, 49) for p in range(8)}
    assert due[0] == [24, 48] and due[1] == [3, 27] and due[7] == [21, 45]
    per_step = [sum(s in due[p] for p in range(8)) for s in range(1, 49)]
    assert max(per_step) == 1 and sum(per_step) == 16                          # one fragment in flight at a time
    for h, frags in ((1, 1), (5, 3), (24, 8), (7, 16)):                       # the modulo rule it replaced
        c = SyncConfig(num_fragments=frags, inner_steps=h)
        for p in range(frags):
            assert steps_until(p, c, 200) == [s for s in range(1, 201) if s % h == (p * h // frags) % h]


def test_a_ramp_pushes_every_h0_steps_first_then_grows_to_h():
    cfg = SyncConfig(num_fragments=1, inner_steps=24, inner_steps_start=6, inner_steps_ramp=60)
    due = steps_until(0, cfg, 200)
    gaps = [b - a for a, b in zip(due, due[1:])]
    assert due[0] == 6 and gaps[0] == 8                                       # at step 6: 6 + 18 * 6/60 = 7.8
    assert gaps == sorted(gaps) and gaps[-1] == 24 and gaps.count(24) >= 4    # grows, then H after the ramp
    assert len(due) > len(steps_until(0, SyncConfig(num_fragments=1, inner_steps=24), 200))
    staggered = SyncConfig(num_fragments=4, inner_steps=24, inner_steps_start=8, inner_steps_ramp=40)
    assert [steps_until(p, staggered, 8)[:1] for p in range(4)] == [[8], [2], [4], [6]]


def test_a_learner_pushes_on_the_schedule_and_a_resumed_one_keeps_its_phase():
    cfg = SyncConfig(num_fragments=2, inner_steps=12, inner_steps_start=4, inner_steps_ramp=30, alpha=0.0)
    expected = {p: steps_until(p, cfg, 80) for p in range(2)}

    def pushes(first: int) -> dict[int, list[int]]:
        sync = DilocoSync(Arrays(w=np.zeros(64, np.float32), v=np.zeros(64, np.float32)), cfg, run_id="r", learner="l0")
        got: dict[int, list[int]] = {0: [], 1: []}
        for step in range(first, 81):
            for push in sync.after_step(step, tokens=10):
                got[push.header.fragment].append(step)
        return got

    assert pushes(1) == expected
    assert pushes(33) == {p: [s for s in steps if s >= 33] for p, steps in expected.items()}


@pytest.mark.parametrize("bad, message", [
    (dict(inner_steps_start=30), "inner_steps_start"),                        # above H
    (dict(inner_steps_start=6), "go together"),                               # a start without a ramp
    (dict(inner_steps_ramp=50), "go together"),                               # a ramp without a start: ignored otherwise
    (dict(inner_steps_start=-1, inner_steps_ramp=5), "inner_steps_start"),
])
def test_a_ramp_that_cannot_be_honoured_is_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        SyncConfig(inner_steps=24, **bad)


def test_globals_apply_in_order_wait_on_a_gap_and_a_keyframe_repairs_it():
    cfg = SyncConfig(num_fragments=1, inner_steps=4, alpha=0.0)
    sync = DilocoSync(Arrays(w=np.zeros(300, np.float32)), cfg, run_id="r", learner="l0")
    shadow = BroadcastShadow(run_id="r", fingerprint=sync.fingerprint, keyframe_every=4, codec_down="q4")
    rng = np.random.default_rng(0)
    theta = np.zeros(300, np.float32)
    msgs = {}
    for v in range(6):
        theta = theta + rng.standard_normal(300).astype(np.float32)
        msgs[v] = [chunk for h, p in shadow.publish(0, v, theta) for chunk in split_chunks(h, p, 100)]
    for h, payload in msgs[0] + msgs[2]:                                        # v1 is missing
        sync.offer(h, payload)
    assert sync.apply_globals() and sync.versions[0] == 0
    for h, payload in msgs[3] + msgs[4]:                                        # v4 carries a keyframe
        sync.offer(h, payload)
    sync.apply_globals()
    assert sync.versions[0] == 4
    for h, payload in msgs[5] + msgs[1]:                                        # an old delta is ignored
        sync.offer(h, payload)
    sync.apply_globals()
    assert sync.versions[0] == 5 and sync.anchors[0].tobytes() == shadow.shadows[0].tobytes()
    assert sync.arrays["w"].tobytes() == shadow.shadows[0].tobytes()            # alpha 0: overwrite
    assert np.abs(shadow.shadows[0] - theta).max() < 0.1 * np.abs(theta).max()
