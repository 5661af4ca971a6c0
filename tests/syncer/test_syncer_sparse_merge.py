"""Sparse pushes (topk2/4/8) merged as (indices, values) (services/syncer/sparse.py) give what decoding them densely
gives: the same entries, the same Gram rows up to the order of a float64 sum, and the same merged Θ and b; with the same
coefficients the step's bits are identical. Random pushes from several islands, fragments that end inside a chunk and
a step piece, repeated offsets, a newer push replacing a learner's, and a dense push joining a sparse round."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.codecs.sparse import SparseCodec
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import gram, merge, sparse
from yeto.services.syncer.fragment import FragmentState
from yeto.services.syncer.rows import FragmentRows

SPARSE = [c for c in codecs.CODECS.values() if isinstance(c, SparseCodec)]
FP = "f" * 64
CONFIG = SyncConfig(num_fragments=1, inner_steps=8, merge="rda", outer_lr=0.7, momentum=0.9, max_push_norm_ratio=1e9)


def header(learner: str, kind: str, codec: str, payload: bytes, n: int, *, tokens: int = 1000) -> FragmentHeader:
    return FragmentHeader(run_id="t", learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=n,
                          c_tokens=tokens, c_steps=8, local_step=8, base_version=0, sha256=sha256(payload))


def pushes(codec, n: int, seed: int) -> list[tuple[str, bytes, int]]:
    """Four pushes from three islands (the third pushes twice: its second replaces its first), varied token counts."""
    rng = np.random.default_rng(seed)
    out = []
    for learner, tokens in (("a", 900), ("b", 1300), ("c", 400), ("c", 700)):
        d = rng.standard_normal(n).astype(np.float32) * rng.uniform(0.1, 3.0)
        d[rng.random(n) < 0.3] = 0           # chunks with fewer than k nonzero values: repeated entries
        out.append((learner, codec.encode(d), tokens))
    return out


def one_round(theta: np.ndarray, momentum: np.ndarray, sent: list[tuple[str, bytes, int]], codec_of, *, on: bool):
    """A fragment at `theta`, `momentum` takes in `sent` and merges: (theta', b', every push's products). Dense pushes
    fold their Gram rows as they are decoded, so each push's products are there to compare (the merge's one pass gives
    the same bits: test_syncer_gram_at_merge.py)."""
    sparse.use_sparse_merge(on)
    gram.gram_at_merge(False)
    try:
        n = theta.size
        frag = FragmentState.adopt(header("a", "init", "f32", theta.tobytes(), n), theta, "t", CONFIG)
        frag.rows = FragmentRows(theta, momentum)
        products, headers = [], []
        for i, (learner, payload, tokens) in enumerate(sent):
            h = header(learner, "push", codec_of(i), payload, n, tokens=tokens)
            products.append(frag.take_in(h, payload))
            frag.add(h, float(i), products[-1])
            headers = [p.header for p in frag.round.pending.values()]
        kept = {m for m in range(len(headers)) if m in frag.rows.sparse}
        all_sparse = all(codec_of(i) != "q4" for i in range(len(sent)))
        assert kept == (set(range(len(headers))) if on and all_sparse else set())
        assert not on or not kept or not frag.rows.rows[2:].any()      # their dense rows were never written
        combo, *_ = frag.merge(headers, CONFIG, lambda: 0.0)
        assert combo is not None and not frag.rows.sparse
        return frag.theta.copy(), frag.rows.momentum.copy(), products
    finally:
        sparse.use_sparse_merge(True)
        gram.gram_at_merge(True)


@pytest.mark.parametrize("codec", SPARSE, ids=lambda c: c.name)
@pytest.mark.parametrize("n", [1, 63, 64, 1000, 3 * 512 + 37, 70_000])
def test_entries_are_the_dense_decode_also_for_hostile_bytes(codec, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    x[rng.random(n) < 0.5] = 0
    for payload in (codec.encode(x), rng.integers(0, 256, codec.encoded_size(n), dtype=np.uint8).tobytes()):
        idx, vals, chunks = codec.decode_entries(payload, n)
        with np.errstate(invalid="ignore"):
            dense = codec.decode(payload, n)
        assert idx.dtype == np.int64 and vals.dtype == np.float32 and (np.diff(idx) > 0).all()
        assert idx.size == 0 or (0 <= idx[0] and idx[-1] < n)
        assert (np.searchsorted(idx, np.arange(chunks.size) * 64) == chunks).all()
        back = np.zeros(n, dtype=np.float32)
        back[idx] = vals
        assert back.tobytes() == dense.tobytes()
        assert np.isin(np.flatnonzero(dense), idx).all()


def test_a_repeated_offset_keeps_the_last_entry_and_the_padding_is_dropped():
    codec = codecs.codec("topk4")
    scale = np.array([0x3F80], dtype="<u2").tobytes()          # bf16 1.0
    entries = bytes([5 | 1 << 6, 5, 9 | 3 << 6, 40 | 1 << 6])    # offset 5 twice (the last: LOW), 9 (-1), 40 past numel
    idx, vals, _ = codec.decode_entries(scale + entries, 20)
    assert idx.tolist() == [5, 9] and vals.tolist() == [np.float32(0.6), -1.0]
    dense = codec.decode(scale + entries, 20)
    assert dense[5] == vals[0] and dense[9] == -1.0 and np.count_nonzero(dense) == 2


@pytest.mark.parametrize("codec", SPARSE, ids=lambda c: c.name)
@pytest.mark.parametrize("n", [3 * 512 + 37, 70_000])
def test_a_sparse_round_merges_to_the_dense_rounds_theta(codec, n):
    rng = np.random.default_rng(7)
    theta, momentum = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32) * 0.1
    sent = pushes(codec, n, seed=n)
    t_sparse, b_sparse, p_sparse = one_round(theta, momentum, sent, lambda i: codec.name, on=True)
    t_dense, b_dense, p_dense = one_round(theta, momentum, sent, lambda i: codec.name, on=False)
    for got, want in zip(p_sparse, p_dense):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    np.testing.assert_array_max_ulp(t_sparse, t_dense, maxulp=2)
    np.testing.assert_array_max_ulp(b_sparse, b_dense, maxulp=2)
    assert not np.array_equal(t_sparse, theta)


@pytest.mark.parametrize("codec", SPARSE, ids=lambda c: c.name)
def test_with_the_same_coefficients_the_sparse_step_gives_the_dense_steps_bits(codec):
    n = 5 * 512 + 100
    rng = np.random.default_rng(3)
    theta, momentum = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    payloads = [payload for _, payload, _ in pushes(codec, n, seed=11)]
    dense, kept = FragmentRows(theta, momentum), FragmentRows(theta, momentum)
    for m, payload in enumerate(payloads):
        dense.push(m)[:] = codec.decode(payload, n)
        kept.keep_sparse(m, sparse.SparsePush(*codec.decode_entries(payload, n)))
    g = merge.gram(dense.rows[1:2 + len(payloads)])
    for frag in (dense, kept):
        combo = merge.merge_round(frag, len(payloads), [1.0, 2.0, 0.5, 1.5], merge="rda", lr=0.7, momentum=0.9,
                                  g=g[1:, 1:], bd=g[0, 1:])
        assert combo is not None
    assert kept.rows[:2].tobytes() == dense.rows[:2].tobytes()


def test_a_dense_push_joining_a_sparse_round_writes_the_sparse_ones_out_first():
    n = 4 * 512 + 7
    rng = np.random.default_rng(5)
    theta, momentum = rng.standard_normal(n).astype(np.float32), np.zeros(n, dtype=np.float32)
    topk, q4 = codecs.codec("topk4"), codecs.codec("q4")
    sent = pushes(topk, n, seed=1)[:2]
    sent.append(("c", q4.encode(rng.standard_normal(n).astype(np.float32)), 500))
    names = ["topk4", "topk4", "q4"]
    t_sparse, b_sparse, p_sparse = one_round(theta, momentum, sent, names.__getitem__, on=True)
    t_dense, b_dense, p_dense = one_round(theta, momentum, sent, names.__getitem__, on=False)
    for got, want in zip(p_sparse, p_dense):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_array_max_ulp(t_sparse, t_dense, maxulp=2)
    np.testing.assert_array_max_ulp(b_sparse, b_dense, maxulp=2)
