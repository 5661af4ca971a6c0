"""q4, bf16 and f32 codecs: per-block error bound, exact round trips, error feedback tracking the true sum."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from yeto.schemas import codecs
from yeto.schemas.codecs import q4

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.integers(1, 1500), elements=finite))
def test_q4_error_is_within_half_a_step_of_each_block(x):
    y = codecs.Q4.decode(codecs.Q4.encode(x), x.size)
    for start in range(0, x.size, q4.BLOCK):
        block, out = x[start:start + 256].astype(np.float64), y[start:start + 256].astype(np.float64)
        scale = np.abs(block).max()
        assert np.all(np.abs(out - block) <= scale / (2 * q4.LEVELS) * (1 + 1e-5) + 1e-30)
        assert np.abs(out).max() <= scale * (1 + 1e-6)


def test_q4_size_is_4_125_bits_per_value_and_zero_stays_zero():
    assert codecs.Q4.encoded_size(256 * 1000) * 8 / (256 * 1000) == 4.125
    x = np.zeros(300, dtype=np.float32)
    x[7] = -3.0
    y = codecs.Q4.decode(codecs.Q4.encode(x), 300)
    assert y[7] == -3.0 and np.count_nonzero(y) == 1


def test_bf16_rounds_to_nearest_even_like_torch():
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 100
    x[:4] = [np.inf, -np.inf, 0.0, -0.0]
    ours = codecs.BF16.decode(codecs.BF16.encode(x), x.size)
    assert ours.tobytes() == torch.from_numpy(x).bfloat16().float().numpy().tobytes()
    assert np.isnan(codecs.BF16.decode(codecs.BF16.encode(np.array([np.nan], np.float32)), 1)[0])


def test_f32_round_trip_is_exact_and_bad_sizes_are_refused():
    x = np.random.default_rng(1).standard_normal(33).astype(np.float32)
    payload = codecs.F32.encode(x)
    assert codecs.F32.decode(payload, 33).tobytes() == x.tobytes()
    with pytest.raises(ValueError, match="must be 132 bytes"):
        codecs.F32.decode(payload[:-1], 33)
    with pytest.raises(ValueError, match="unknown codec 'q3'; use one of f32, bf16, q4"):
        codecs.codec("q3")


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 700), st.floats(1e-3, 10.0))
def test_error_feedback_sum_of_decoded_tracks_true_sum_within_one_quantum(seed, n, scale):
    rng = np.random.default_rng(seed)
    fb = codecs.ErrorFeedback(codecs.Q4)
    true_sum = np.zeros(n, dtype=np.float64)
    sent_sum = np.zeros(n, dtype=np.float64)
    for _ in range(40):
        d = (rng.standard_normal(n) * scale).astype(np.float32)
        sent_value = d + fb.residuals.get("frag", np.zeros(n, np.float32))       # what this round encodes
        true_sum += d
        sent_sum += codecs.Q4.decode(fb.encode("frag", d), n)
        pad = np.zeros(-(-n // 256) * 256)
        pad[:n] = np.abs(sent_value)
        quantum = np.repeat(pad.reshape(-1, 256).max(axis=1) / q4.LEVELS, 256)[:n]   # one step of each block
        # no drift: after 40 rounds the decoded sum is within one quantum (half a step, plus f32 rounding)
        assert np.all(np.abs(true_sum - sent_sum) <= 0.5 * quantum + 1e-5 * scale * 40)


@pytest.mark.filterwarnings("error")
def test_q4_handles_subnormal_scales_and_keeps_nan_detectable():
    tiny = np.array([1e-45, -3e-45, 0.0, 2e-45] * 64, dtype=np.float32)
    assert np.array_equal(codecs.Q4.decode(codecs.Q4.encode(tiny), tiny.size), tiny)
    x = np.ones(300, dtype=np.float32)
    x[5] = np.nan
    y = codecs.Q4.decode(codecs.Q4.encode(x), 300)
    assert np.isnan(y[:256]).all() and np.isfinite(y[256:]).all()    # the block with the NaN decodes as NaN
