"""The compiled host kernels (numba) against the NumPy reference they replaced: q4 bytes and floats identical, the
Gram row and the outer step within f32 rounding, and no result depending on the thread count."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.codecs import base, q4
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.services.syncer import gram, merge, outputs
from yeto.services.syncer.rows import FragmentRows


def _with(kernels: str, threads: int, fn):
    base.use_kernels(kernels)
    base.set_threads(threads)
    try:
        return fn()
    finally:
        base.use_kernels("compiled")
        base.set_threads(1)


def _awkward() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    cases = [rng.standard_normal(n, dtype=np.float32) * s for n in (1, 255, 256, 257, 70_003) for s in (1, 1e-40, 1e30)]
    x = rng.standard_normal(5000, dtype=np.float32)
    x[[3, 1001]], x[600], x[1000], x[2000:2256], x[2300] = np.nan, np.inf, -np.inf, 0, -0.0
    return [*cases, x, np.zeros(300, dtype=np.float32)]


@pytest.mark.timeout(120)
def test_compiled_q4_gives_the_reference_bytes_and_floats_nan_and_infinite_blocks_included():
    for x in _awkward():
        want = _with("reference", 1, lambda x=x: codecs.Q4.encode(x))
        for threads in (1, 2):
            assert _with("compiled", threads, lambda x=x: codecs.Q4.encode(x)) == want, x.size
            got = _with("compiled", threads, lambda x=x, want=want: codecs.Q4.decode(want, x.size))
            assert got.tobytes() == _with("reference", 1, lambda x=x, want=want: codecs.Q4.decode(want, x.size)).tobytes(), x.size


@pytest.mark.timeout(120)
def test_compiled_q4_decode_of_any_bytes_is_the_reference_decode_every_code_and_scale():
    """Bytes no encoder writes (an island's are hostile): every code byte, code 8 (a signed zero), scales negative,
    subnormal, zero, infinite and NaN, a row at an odd f32 offset. The compiled decode (a byte's two values from one
    64-bit table word, then scaled) and the decode fused with its squared norm give the reference's bits; into a
    strided or float64 array, the same values and nothing written beside them."""
    rng = np.random.default_rng(7)
    for n in (256, 257, 2048 + 77, 3 * gram.PIECE + 5):
        blocks = -(-n // q4.BLOCK)
        scales = rng.standard_normal(blocks, dtype=np.float32)
        special = np.array([0, -0.0, 1e-42, np.inf, -np.inf, np.nan, -3e38], dtype=np.float32)
        at = np.arange(0, blocks, 2)[:special.size]
        scales[at] = special[:at.size]
        codes = rng.integers(0, 256, (blocks, q4.BLOCK // 2), dtype=np.uint8)
        codes[0] = np.arange(128, dtype=np.uint8)
        codes[-1] = np.arange(128, 256, dtype=np.uint8)
        payload = scales.tobytes() + codes.tobytes()
        want = _with("reference", 1, lambda payload=payload, n=n: codecs.Q4.decode(payload, n))
        for threads in (1, 2):
            rows = np.zeros((3, n), dtype=np.float32)          # row 1 starts at an odd f32 offset when n is odd
            got = _with("compiled", threads, lambda p=payload, n=n, out=rows[1]: codecs.Q4.decode(p, n, out=out))
            assert got.tobytes() == want.tobytes(), (n, threads)
            rows[1] = 0
            _with("compiled", threads, lambda p=payload, n=n, row=rows[1]: gram.decode_with_norm(codecs.Q4, p, n, row))
            assert rows[1].tobytes() == want.tobytes(), (n, threads)
            strided = np.zeros(2 * n, dtype=np.float32)[::2]       # no 64-bit words over these: decoded apart, copied
            got = _with("compiled", threads, lambda p=payload, n=n, out=strided: codecs.Q4.decode(p, n, out=out))
            assert got is strided and got.tobytes() == want.tobytes() and not strided.base[1::2].any(), (n, threads)
            wide = _with("compiled", threads, lambda p=payload, n=n: codecs.Q4.decode(p, n, out=np.zeros(n)))
            np.testing.assert_array_equal(wide, want.astype(np.float64))


@pytest.mark.timeout(120)
def test_compiled_gram_row_and_outer_step_match_the_reference_and_not_the_thread_count():
    rng = np.random.default_rng(2)
    n = (1 << 19) + 77
    theta, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    pushes = rng.standard_normal((4, n), dtype=np.float32) * 1e-3

    def step() -> tuple[np.ndarray, np.ndarray]:
        f = FragmentRows(theta, b)
        for k in range(4):
            f.push(k)[:] = pushes[k]
        g = gram.gram_row(f.rows[1:6], f.rows[5])
        assert merge.merge_round(f, 4, [1, 2, 3, 4], merge="rda", lr=0.7, momentum=0.9) is not None
        return g, f.rows[:2].copy()

    ref_g, ref_rows = _with("reference", 1, step)
    one_g, one_rows = _with("compiled", 1, step)
    two_g, two_rows = _with("compiled", 2, step)
    assert one_g.tobytes() == two_g.tobytes() and one_rows.tobytes() == two_rows.tobytes(), "the thread count changed bits"
    rows = np.vstack([b, pushes]).astype(np.float64)
    exact = rows @ rows[-1]                      # the float64 reference: each product exact, summed in float64
    scale = np.sqrt(np.sum(rows * rows, axis=1) * exact[-1])   # Cauchy-Schwarz: |<a, d>| <= |a| |d|
    assert np.all(np.abs(one_g - exact) <= 1e-12 * scale), "the compiled fold sums in float64"
    assert np.all(np.abs(ref_g - exact) <= 1e-6 * scale), "the reference sums f32 chunks"
    np.testing.assert_allclose(one_rows, ref_rows, rtol=1e-5, atol=1e-6 * np.abs(ref_rows).max())


@pytest.mark.timeout(120)
def test_fused_broadcast_encode_gives_the_bytes_and_shadow_of_encode_then_decode_and_add():
    """The broadcast's one pass (q4 `encode_delta`) against encode(theta - shadow), then shadow += decode, as
    learners apply it: the same payload and the same shadow bits, for every thread count and awkward block."""
    rng = np.random.default_rng(3)
    for x in _awkward():
        theta = x + rng.standard_normal(x.size, dtype=np.float32)
        shadow = rng.standard_normal(x.size, dtype=np.float32)
        want_payload = _with("reference", 1, lambda t=theta, s=shadow: codecs.Q4.encode(t - s))
        want_shadow = shadow + codecs.Q4.decode(want_payload, x.size)
        for kernels, threads in (("compiled", 1), ("compiled", 2), ("separate", 1), ("reference", 1)):
            got_shadow = shadow.copy()
            payload = _with(kernels, threads, lambda t=theta, s=got_shadow: base.encode_delta(codecs.Q4, t, s))
            assert payload == want_payload, (x.size, kernels, threads)
            assert got_shadow.tobytes() == want_shadow.tobytes(), (x.size, kernels, threads)
    generic = rng.standard_normal(1000, dtype=np.float32)
    shadow = np.zeros(1000, dtype=np.float32)
    payload = base.encode_delta(codecs.BF16, generic, shadow)        # a codec without a fused pass: the generic one
    assert payload == codecs.BF16.encode(generic) and shadow.tobytes() == codecs.BF16.decode(payload, 1000).tobytes()


@pytest.mark.timeout(120)
def test_fused_decode_and_gram_row_give_the_bits_of_decode_then_fold():
    """A push's q4 decode fused with its Gram row (gram.RowProducts.decode: one parallel pass) against the decode
    followed by the compiled fold of the whole row: the same row bits and the same products, whatever the thread
    count; a NaN block's products are not finite."""
    rng = np.random.default_rng(4)
    for n in (1, 300, gram.PIECE, gram.PIECE + 257, 3 * gram.PIECE - 5):
        x = rng.standard_normal(n, dtype=np.float32)
        if n > 300:
            x[n // 2] = np.nan
        payload = codecs.Q4.encode(x)
        rows = rng.standard_normal((4, n), dtype=np.float32)
        want_row = codecs.Q4.decode(payload, n)
        rows[-1] = want_row
        want = gram.gram_row(rows, rows[-1])
        for threads in (1, 2):
            rows[-1] = 0
            acc = gram.RowProducts(rows, rows[-1])
            _with("compiled", threads, lambda acc=acc, payload=payload, n=n: acc.decode(codecs.Q4, payload, n))
            assert rows[-1].tobytes() == want_row.tobytes(), (n, threads)
            assert acc.products.tobytes() == want.tobytes(), (n, threads)
        assert np.isfinite(acc.products).all() == (n <= 300)


def test_broadcast_chunks_hashed_on_threads_are_split_chunks():
    """The broadcast's chunking (the payload's hash taken from its header, chunks hashed on threads) gives exactly
    split_chunks' headers and chunks, one chunk or many, with the fused kernels or the separate ones."""
    rng = np.random.default_rng(5)
    for size in (100, 4096, 10_000):
        payload = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        h = FragmentHeader(run_id="r", fragment=0, kind="delta", fingerprint="f" * 64, codec="f32", numel=size // 4,
                           version=3, base_version=2, sha256=sha256(payload))
        want = split_chunks(h, payload, 1024)
        for kernels, threads in (("compiled", 2), ("compiled", 1), ("separate", 2)):
            got = _with(kernels, threads, lambda h=h, payload=payload: outputs.broadcast_chunks(h, payload, 1024))
            assert [(a.model_dump(), c) for a, c in got] == [(a.model_dump(), c) for a, c in want], (size, kernels)


@pytest.mark.timeout(120)
def test_kernels_called_band_by_band_give_the_bits_of_one_call(monkeypatch):
    """The passes over long rows run as parallel calls of a band each (q4 _FOLD_BAND, gram.BAND, merge.STEP_BAND):
    with bands far smaller than the rows, every result has the bits of one call over the whole row."""
    rng = np.random.default_rng(6)
    n = 5 * gram.PIECE + 300
    theta, shadow = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    theta[777] = np.nan

    def everything() -> list[bytes]:
        s = shadow.copy()
        payload = codecs.Q4.encode_delta(theta, s)
        rows = FragmentRows(theta, shadow)
        for k in range(3):
            rows.push(k)[:] = rng.standard_normal(n, dtype=np.float32) * 1e-3
        rows.push(3)[:] = 0
        acc = gram.RowProducts(rows.rows[1:6], rows.push(3))
        acc.decode(codecs.Q4, codecs.Q4.encode(theta * 1e-3), n)
        rows.rows[0, 777] = 0
        assert merge.merge_round(rows, 3, [1, 2, 3], merge="rda", lr=0.7, momentum=0.9) is not None
        return [codecs.Q4.encode(theta), payload, s.tobytes(), acc.products.tobytes(),
                gram.gram_row(rows.rows[1:4], rows.rows[3]).tobytes(), rows.rows[:2].tobytes()]

    state = rng.bit_generator.state
    whole = _with("compiled", 2, everything)
    monkeypatch.setattr(q4, "_FOLD_BAND", 2 * gram.PIECE)
    monkeypatch.setattr(gram, "BAND", gram.PIECE)
    monkeypatch.setattr(merge, "STEP_BAND", 4 * merge.STEP_PIECE)
    rng.bit_generator.state = state
    assert _with("compiled", 2, everything) == whole
