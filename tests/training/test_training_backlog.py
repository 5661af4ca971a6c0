"""A push that no applied global answers yet is the last one the next push builds on: pushes made from one anchor
(a round trip longer than H steps, a syncer working off a backlog of pushes at its start) each carry only the
progress since the one before, so the real SyncerCore, merging them round after round, takes every step once.
Before, each push carried everything since the anchor, the syncer merged each of them, and the outer step took the
first interval's progress up to max_base_lag + 1 times: a sharded run whose syncers started late ended above the
base model's held-out loss (tests/e2e/test_e2e_shards.py in a loaded CI run)."""
from __future__ import annotations

import numpy as np

from test_training_simulation import DictArrays, Wire
from yeto.learners.diloco_sync import DilocoSync
from yeto.schemas import codecs
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import LearnerRejected, RoundMerged
from yeto.services.syncer.core import SyncerCore

SHAPES = {"model.layers.0.mlp.weight": (16, 8), "model.layers.1.mlp.weight": (8, 8)}
H = 4


def one_learner(tmp_path, pushes: int):
    """One learner trains `pushes` intervals while every push waits (the syncer is not reading yet), then the
    syncer takes them all: (the learner, its values at the last push, the wire, the pushes in order)."""
    config = SyncConfig(num_fragments=1, inner_steps=H, quorum=1, outer_lr=1.0, momentum=0.0, merge="avg", alpha=0.0,
                        codec_up="f32", codec_down="f32", max_push_norm_ratio=10.0, max_push_rms=10.0)
    rng = np.random.default_rng(0)
    core = SyncerCore(config, run_id="r-backlog")
    bus = Wire(core, tmp_path)
    sync = DilocoSync(DictArrays({k: rng.standard_normal(s) for k, s in SHAPES.items()}), config,
                      run_id="r-backlog", learner="l0")
    wire = bus.transport("l0")
    for push in sync.init_pushes():
        wire.send_push(push.header, push.payload)
    sync.receive(wire)
    sync.apply_globals()                                  # version 0 is the learner's own values
    held = []
    for step in range(1, pushes * H + 1):
        for value in sync.arrays.values.values():
            value += 0.01 * rng.standard_normal(value.shape).astype(np.float32)
        held += sync.after_step(step, 100)
    last = np.concatenate([sync.arrays.values[k].reshape(-1) for k in sorted(SHAPES)])
    for i, push in enumerate(held):                       # the backlog, read in order
        wire.send_push(push.header, push.payload)
        bus.now = float(i + 1)
        bus.handle(core.tick(bus.now))
    return sync, last, bus, held


def test_pushes_from_one_anchor_carry_only_the_progress_since_the_one_before(tmp_path):
    sync, last, bus, held = one_learner(tmp_path, pushes=3)
    assert [p.header.base_version for p in held] == [0, 0, 0]
    assert [(p.header.c_steps, p.header.c_tokens) for p in held] == [(H, 100 * H)] * 3
    assert [p.header.tokens_to for p in held] == [100 * H, 200 * H, 300 * H]
    progress = sum(codecs.F32.decode(p.payload, p.header.numel) for p in held)
    assert np.allclose(progress + sync.anchors[0], last, atol=1e-5)


def test_the_syncer_merges_a_backlog_of_pushes_from_one_anchor_into_the_learners_own_values(tmp_path):
    """Outer lr 1, no momentum, one learner: the global after every push is merged is the learner's values at
    its last push, not the anchor plus 1 + 2 + 3 times the first interval's progress."""
    _, last, bus, held = one_learner(tmp_path, pushes=3)
    merged = [e for e in bus.events if isinstance(e, RoundMerged)]
    assert [e.global_version for e in merged] == [1, 2, 3]
    assert not [e for e in bus.events if isinstance(e, LearnerRejected)]
    assert np.allclose(bus.core.fragments[0].theta, last, atol=1e-5), np.abs(bus.core.fragments[0].theta - last).max()
    assert [e.tokens for e in merged] == [100 * H] * 3       # the goodput counts each token once too


def test_after_a_global_lands_the_next_push_is_again_everything_since_the_anchor(tmp_path):
    sync, _, bus, held = one_learner(tmp_path, pushes=2)
    wire = bus.transport("l0")
    sync.receive(wire)
    assert sync.apply_globals() and sync.versions[0] == 2 and not sync.unanswered
    pushes = []
    for step in range(2 * H + 1, 3 * H + 1):
        for value in sync.arrays.values.values():
            value += 0.5 / H
        pushes += sync.after_step(step, 100)
    (push,) = pushes
    d = codecs.F32.decode(push.payload, push.header.numel)
    assert push.header.base_version == 2 and (push.header.c_steps, push.header.c_tokens) == (H, 100 * H)
    assert np.allclose(d, 0.5, atol=1e-6)
