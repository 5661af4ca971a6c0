"""The sparse codecs (topk2, topk4, topk8): exact sizes fixed by numel, the k largest of each chunk kept, error feedback that
loses nothing, a sparse broadcast whose residual (Θ − shadow) survives a snapshot, and a simulated run that trains."""
from __future__ import annotations

import numpy as np
import pytest

from test_training_simulation import run
from yeto.schemas import codecs
from yeto.schemas.codecs.sparse import CHUNK, SparseCodec
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import LearnerRejected, RoundMerged
from yeto.services.syncer import snapshot
from yeto.services.syncer.broadcast import Shadow

SPARSE = [c for c in codecs.CODECS.values() if isinstance(c, SparseCodec)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("codec", SPARSE, ids=lambda c: c.name)
def test_a_sparse_payload_has_the_exact_size_its_numel_fixes(codec):
    assert {c.name for c in SPARSE} == {"topk2", "topk4", "topk8"}
    rng = np.random.default_rng(0)
    for numel in (1, 63, 64, 65, 4096, 100_003):
        size = -(-numel // CHUNK) * (2 + codec.k)
        assert codec.encoded_size(numel) == size
        for x in (rng.standard_normal(numel), np.zeros(numel), np.full(numel, np.nan)):
            assert len(codec.encode(x.astype(np.float32))) == size
    assert codec.encoded_size(64 * 1000) / (4 * 64 * 1000) == (2 + codec.k) / 256        # 1/64 of f32 for topk2


@pytest.mark.timeout(30)
@pytest.mark.parametrize("codec", SPARSE, ids=lambda c: c.name)
def test_each_chunk_keeps_its_k_largest_values_with_their_signs_and_nothing_else(codec):
    x = np.random.default_rng(1).standard_normal(64 * 50 + 17).astype(np.float32)
    y = codec.decode(codec.encode(x), x.size)
    padded = np.zeros(-(-x.size // CHUNK) * CHUNK, dtype=np.float32)
    padded[:x.size] = x
    for c, (xc, yc) in enumerate(zip(padded.reshape(-1, CHUNK), np.pad(y, (0, padded.size - y.size)).reshape(-1, CHUNK))):
        top = set(np.argsort(-np.abs(xc))[:codec.k])
        assert set(np.flatnonzero(yc)) == top, c
        assert np.all(np.sign(yc[list(top)]) == np.sign(xc[list(top)]))
        assert np.max(np.abs(yc)) == pytest.approx(np.max(np.abs(xc)), rel=2 ** -8)     # the bf16 scale
    few = np.zeros(200, dtype=np.float32)
    few[[5, 130]] = [0.5, -2.0]                       # fewer nonzero values than k: zeros stay zeros
    assert np.array_equal(codec.decode(codec.encode(few), few.size), few)
    assert np.isnan(codec.decode(codec.encode(np.full(70, np.nan, dtype=np.float32)), 70)).any()   # refused downstream


@pytest.mark.timeout(30)
@pytest.mark.parametrize("codec", SPARSE, ids=lambda c: c.name)
def test_error_feedback_carries_everything_a_sparse_push_left_out(codec):
    rng = np.random.default_rng(2)
    feedback = codecs.ErrorFeedback(codec)
    total, sent = np.zeros(5000, dtype=np.float64), np.zeros(5000, dtype=np.float64)
    for _ in range(60):
        d = (rng.standard_normal(5000) + 0.3).astype(np.float32)       # a drift every push repeats
        total += d
        sent += codec.decode(feedback.encode("p", d), d.size)
    residual = feedback.residuals["p"]
    assert np.allclose(sent + residual, total, atol=1e-3 * np.abs(total).max())          # nothing lost
    assert np.linalg.norm(residual) < 0.3 * np.linalg.norm(total)                      # and most of it sent


@pytest.mark.timeout(30)
def test_a_sparse_broadcast_keeps_its_residual_in_the_shadow_and_it_survives_a_snapshot(tmp_path):
    rng = np.random.default_rng(3)
    shadow = Shadow(run_id="r", fragment=0, fingerprint="f" * 64, role="layers", keyframe_every=1000, codec_down="topk2")
    theta = rng.standard_normal(6400).astype(np.float32)
    shadow.publish(0, theta)
    for v in range(1, 11):
        theta = theta + 0.01 * rng.standard_normal(theta.size).astype(np.float32)
        ((header, payload),) = shadow.publish(v, theta)
        assert header.codec == "topk2" and len(payload) == codecs.codec("topk2").encoded_size(theta.size) == 400
    residual = theta - shadow.values                  # what the broadcast has not sent yet: the syncer's error feedback
    assert np.linalg.norm(residual) > 0
    snapshot.write(tmp_path, snapshot.FragmentSnapshot(fragment=0, version=10, fingerprint="f" * 64, theta=theta,
                                                       momentum=np.zeros_like(theta), shadow=shadow.values))
    snap = snapshot.read_all(tmp_path)[0]
    restored = Shadow(run_id="r", fragment=0, fingerprint="f" * 64, role="layers", keyframe_every=1000, codec_down="topk2")
    restored.reset(snap.version, snap.shadow)
    assert np.array_equal(snap.theta - restored.values, residual)
    for v in range(11, 400):                          # θ stops moving: the residual drains into the learners' copy
        (a,) = shadow.publish(v, theta)
        (b,) = restored.publish(v, np.array(snap.theta))
        assert a[1] == b[1]                           # the restored syncer sends exactly what the first one would
    assert np.linalg.norm(theta - shadow.values) < 0.01 * np.linalg.norm(residual)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("up, down", [("topk2", "topk4"), ("topk4", "topk4")])
def test_learners_pushing_sparse_with_a_sparse_broadcast_converge_and_stay_bit_identical(tmp_path, up, down):
    # The toy moves each value ~2 from a start of norm ~1 per value, a third of the way in each interval: error feedback
    # at 3-6% density lags by tens of rounds, so a whole outer step (lr 1) winds up and overshoots here; 0.3 converges.
    # For the same reason its residual outgrows the fragment's own norm (admission's ratio 1), which training never nears.
    config = SyncConfig(num_fragments=4, inner_steps=8, alpha=0.0, merge="avg", outer_lr=0.3, momentum=0.0,
                        codec_up=up, codec_down=down, max_push_norm_ratio=10.0)
    core, bus, learners, init, mean = run(tmp_path, num_learners=2, steps=480, config=config)
    assert all(isinstance(s.feedback, codecs.ErrorFeedback) and s.feedback.codec.name == up for s in learners)
    assert len([e for e in bus.events if isinstance(e, RoundMerged)]) >= 4 * 55
    assert not [e for e in bus.events if isinstance(e, LearnerRejected)]
    layout = learners[0].layout
    for p in learners[0].active:
        assert all(s.anchors[p].tobytes() == core.fragments[p].shadow.values.tobytes() for s in learners)
        target = np.concatenate([mean[t.name].ravel() for t in layout.fragments[p]])
        start = np.concatenate([init[t.name].ravel() for t in layout.fragments[p]])
        assert np.linalg.norm(core.fragments[p].theta - target) < 0.25 * np.linalg.norm(start - target)


@pytest.mark.timeout(30)
def test_error_feedback_with_a_decay_fades_the_residual_and_is_lossless_at_one():
    codec = codecs.codec("topk2")
    d = np.random.default_rng(4).standard_normal(640).astype(np.float32)
    lossless, leaky = codecs.ErrorFeedback(codec), codecs.ErrorFeedback(codec, decay=0.5)
    for feedback in (lossless, leaky):
        feedback.encode("p", d)
    sent = codec.decode(leaky.encode("p", np.zeros_like(d)), d.size)
    kept = codec.decode(codec.encode(d), d.size)
    assert np.allclose(leaky.residuals["p"] + sent, 0.5 * (d - kept))          # e <- decay * e before the next push
    assert np.array_equal(lossless.residuals["p"], d - kept)
