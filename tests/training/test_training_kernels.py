"""The compiled host kernels (numba) against the NumPy reference they replaced: q4 bytes and floats identical, the
Gram row and the outer step within f32 rounding, and no result depending on the thread count."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.codecs import base
from yeto.services.syncer import gram, merge
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
