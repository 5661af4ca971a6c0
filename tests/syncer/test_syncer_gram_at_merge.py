"""A round's Gram matrix taken in one pass over the rows at the merge (services/syncer/gram.py `gram_pass`, the default
on the CPU) gives the bits of folding each push's Gram row as it is decoded (k + 2 rows read for push k): the same
coefficients, norms, cos(delta, b) and merged Θ and b, with a newer push replacing a learner's, a push refused after its
decode, codecs mixed, sparse pushes beside dense ones, fragments ending inside a piece, and any thread count; and so do
q4 pushes kept encoded and decoded inside the merge's passes (gram.keep_encoded, the default)."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.codecs.base import set_threads, threads
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import gram
from yeto.services.syncer.fragment import FragmentState
from yeto.services.syncer.rows import FragmentRows

FP = "f" * 64
CONFIG = SyncConfig(num_fragments=1, inner_steps=8, merge="rda", outer_lr=0.7, momentum=0.9, max_push_norm_ratio=1e9)


def header(learner: str, codec: str, payload: bytes, n: int, *, kind: str = "push", tokens: int = 1000) -> FragmentHeader:
    return FragmentHeader(run_id="t", learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=n,
                          c_tokens=tokens, c_steps=8, local_step=8, base_version=0, sha256=sha256(payload))


def sent(n: int, seed: int, names: list[str]) -> list[tuple[str, str, bytes, int]]:
    """Pushes of learners a, b, c, c (the second of c replaces its first), d, ... in the codecs `names`, with tokens."""
    rng = np.random.default_rng(seed)
    learners = ["a", "b", "c", "c", "d", "e"][:len(names)]
    return [(learner, name, codecs.codec(name).encode(rng.standard_normal(n).astype(np.float32) * rng.uniform(0.1, 3)),
             500 + 100 * i) for i, (learner, name) in enumerate(zip(learners, names, strict=True))]


def one_round(n: int, pushes: list[tuple[str, str, bytes, int]], *, at_merge: bool, refused: int | None = None,
              kept: bool = False):
    """A fragment takes in `pushes` (push `refused` decoded, then dropped as admission's `decoded` would) and merges;
    `kept`: q4 pushes kept encoded and decoded inside the merge's passes (gram.keep_encoded)."""
    gram.gram_at_merge(at_merge)
    gram.keep_encoded(kept)
    try:
        rng = np.random.default_rng(1)
        theta, momentum = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32) * 0.1
        frag = FragmentState.adopt(header("a", "f32", theta.tobytes(), n, kind="init"), theta, "t", CONFIG)
        frag.rows = FragmentRows(theta, momentum)
        norms = []
        for i, (learner, name, payload, tokens) in enumerate(pushes):
            h = header(learner, name, payload, n, tokens=tokens)
            products = frag.take_in(h, payload)
            norms.append(float(products[-1]))
            if i != refused:
                frag.add(h, float(i), products)
        combo, *_ = frag.merge([p.header for p in frag.round.pending.values()], CONFIG, lambda: 0.0)
        assert combo is not None
        return frag.rows.rows[:2].copy(), combo, norms
    finally:
        gram.gram_at_merge(True)
        gram.keep_encoded(True)


@pytest.mark.parametrize("n", [1, 1000, gram.PIECE, 3 * gram.PIECE + 5])
@pytest.mark.parametrize("names", [["q4"] * 4, ["q4", "f32", "q4", "bf16", "q4"], ["topk4", "q4", "topk4", "q4"],
                                   ["q4", "topk4", "q4", "topk4"]], ids="-".join)
@pytest.mark.parametrize("kept", [False, True], ids=["f32-rows", "q4-kept"])
@pytest.mark.parametrize("count", [1, 2])
def test_the_gram_pass_at_the_merge_gives_the_bits_of_folding_each_push_as_it_came(n, names, kept, count):
    pushes = sent(n, n + len(names), names)
    before = threads()
    try:
        set_threads(count)
        got = one_round(n, pushes, at_merge=True, kept=kept)
    finally:
        set_threads(before)
    (rows, combo, norms), (want_rows, want, want_norms) = got, one_round(n, pushes, at_merge=False)
    assert rows.tobytes() == want_rows.tobytes()
    assert combo.coeffs.tobytes() == want.coeffs.tobytes() and combo.norms.tobytes() == want.norms.tobytes()
    assert combo.momentum_cos == want.momentum_cos and combo.merge == want.merge
    assert norms == want_norms                  # what admission's norm bound reads, push by push


@pytest.mark.parametrize("kept", [False, True], ids=["f32-rows", "q4-kept"])
def test_a_push_refused_after_its_decode_leaves_no_trace_in_the_pass(kept):
    pushes = sent(5000, 2, ["q4"] * 5)
    with_refused = one_round(5000, pushes, at_merge=True, refused=2, kept=kept)
    without = one_round(5000, pushes[:2] + pushes[3:], at_merge=False)
    assert with_refused[0].tobytes() == without[0].tobytes()
    assert with_refused[1].coeffs.tobytes() == without[1].coeffs.tobytes()


def test_a_kept_push_of_the_wrong_size_is_refused_as_its_decode_is():
    n = 3 * gram.PIECE + 5
    payload = codecs.Q4.encode(np.ones(n, dtype=np.float32))
    rows = FragmentRows(np.zeros(n, dtype=np.float32))
    for bad in (payload[:-1], payload + b"\0"):
        with pytest.raises(ValueError, match="must be"):
            codecs.Q4.decode(bad, n)
        with pytest.raises(ValueError, match="must be"):
            rows.keep_encoded(0, codecs.Q4, bad, n)


@pytest.mark.parametrize("scale", [np.nan, np.inf, -1.0, 1e-45, 3e38])
def test_a_kept_push_norm_is_the_decode_norm_for_hostile_scales(scale):
    """Every code byte, and scales NaN, infinite, negative, subnormal and huge: the kept bytes' squared norm is the
    bits of the decode's (admission refuses a non-finite one alike)."""
    n = 2 * gram.PIECE + 3 * 256 + 17
    blocks = -(-n // 256)
    rng = np.random.default_rng(5)
    scales = rng.uniform(0.1, 2.0, blocks).astype("<f4")
    scales[::7] = scale
    codes = (np.arange(blocks * 128) % 256).astype(np.uint8)
    payload = scales.tobytes() + codes.tobytes()
    row = np.empty(n, dtype=np.float32)
    want = gram.decode_with_norm(codecs.Q4, payload, n, row)
    kept = FragmentRows(np.zeros(n, dtype=np.float32)).keep_encoded(0, codecs.Q4, payload, n)
    got = gram.kept_norm(codecs.Q4, kept, n)
    assert np.float64(got).tobytes() == np.float64(want).tobytes()


def test_the_pass_gives_the_same_bits_on_any_thread_count():
    n = 5 * gram.PIECE + 300
    rows = np.random.default_rng(4).standard_normal((5, n)).astype(np.float32)
    need = np.tril(np.ones((5, 5), dtype=np.bool_), -1)
    before = threads()
    try:
        got = []
        for count in (1, 2, 3):
            set_threads(count)
            got.append(gram.gram_pass(rows, need).tobytes())
    finally:
        set_threads(before)
    assert got[0] == got[1] == got[2]
    want = np.array([[gram.gram_row(rows[j:j + 1], rows[i])[0] if i != j else 0.0 for j in range(5)] for i in range(5)])
    assert np.abs(np.frombuffer(got[0]).reshape(5, 5) - want).max() <= 1e-9 * np.abs(want).max()
