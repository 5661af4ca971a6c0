"""Merge math against a float64 reference (avg, RDA, weights, staleness), the outer step against
torch.optim.SGD(nesterov=True), and all-or-nothing aborts."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from yeto.services.syncer import gram, merge, rows

torch.set_num_threads(1)


def reference(pushes: np.ndarray, weights: np.ndarray, mode: str) -> np.ndarray:
    deltas = -pushes.astype(np.float64)                      # Delta_m = anchor - local = -d_m
    w = weights / weights.sum()
    avg = (w[:, None] * deltas).sum(0)
    if mode == "avg":
        return avg
    norms = np.linalg.norm(deltas, axis=1)
    direction = (w[:, None] * deltas / norms[:, None]).sum(0)
    return (w @ norms) * direction / np.linalg.norm(direction)


def fragment(rng, n, m):
    f = rows.FragmentRows(rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32) * 0.1, slots=2)
    pushes = (rng.standard_normal((m, n)) * rng.uniform(0.01, 1.0, size=(m, 1)) + rng.standard_normal(n) * 0.5).astype(np.float32)
    for i in range(m):
        f.push(i)[:] = pushes[i]
    return f, pushes


@pytest.mark.parametrize("mode", ["avg", "rda"])
@pytest.mark.parametrize("seed", range(4))
def test_merge_and_nesterov_step_match_float64_reference(mode, seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 200_000)), int(rng.integers(1, 6))
    f, pushes = fragment(rng, n, m)
    theta0, b0 = f.theta.astype(np.float64), f.momentum.astype(np.float64)
    tokens, steps, lags = rng.integers(1, 5000, m), rng.integers(1, 30, m), rng.integers(0, 4, m)
    weights = merge.push_weights(tokens, steps, lags, weighting="tokens", staleness_discount=0.7)
    np.testing.assert_allclose(weights, tokens * 0.7 ** lags)
    plan = merge.merge_round(f, m, weights, merge=mode, lr=0.7, momentum=0.9, chunk=4096)
    delta = reference(pushes, weights, mode)
    assert plan is not None and plan.merge == mode
    assert math.isclose(plan.delta_norm, np.linalg.norm(delta), rel_tol=1e-4)
    b = 0.9 * b0 + delta
    theta = theta0 - 0.7 * (delta + 0.9 * b)
    np.testing.assert_allclose(f.momentum, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())
    np.testing.assert_allclose(f.theta, theta, rtol=1e-4, atol=1e-5 * np.abs(theta).max())


@pytest.mark.parametrize("fraction", [1 / 24, 0.25, 1.0])
def test_a_partial_interval_round_steps_in_token_time(fraction):
    """A round that carries f of an interval: b' = mu^f b + delta, theta' = theta - eta (delta + f mu^f b')."""
    rng = np.random.default_rng(7)
    f, pushes = fragment(rng, 4000, 2)
    theta0, b0 = f.theta.astype(np.float64), f.momentum.astype(np.float64)
    assert merge.merge_round(f, 2, [3.0, 1.0], merge="avg", lr=0.7, momentum=0.9, fraction=fraction) is not None
    delta = reference(pushes, np.array([3.0, 1.0]), "avg")
    decay = 0.9 ** fraction
    b = decay * b0 + delta
    theta = theta0 - 0.7 * (delta + fraction * decay * b)
    np.testing.assert_allclose(f.momentum, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())
    np.testing.assert_allclose(f.theta, theta, rtol=1e-4, atol=1e-5 * np.abs(theta).max())


@pytest.mark.parametrize("restart", ["off", "opposed", "damped"])
@pytest.mark.parametrize("along", [1.0, -1.0])
def test_momentum_cos_is_reported_and_an_opposed_round_drops_b_when_restart_is_on(restart, along):
    """cos(delta, b) from the pushes' products with b; with momentum_restart = opposed a round whose delta points
    against b steps as if b were zero (b' = delta, theta' = theta - eta (1 + mu) delta), with damped as if b were
    (1 + cos) b, else Nesterov as usual."""
    rng = np.random.default_rng(11)
    f, pushes = fragment(rng, 30_000, 3)
    weights = np.array([1.0, 2.0, 3.0])
    delta = reference(pushes, weights, "avg")
    f.rows[1] = (along * delta + 0.3 * np.abs(delta).mean() * rng.standard_normal(delta.size)).astype(np.float32)
    f.momentum_sq = float(f.momentum.astype(np.float64) @ f.momentum.astype(np.float64))
    theta0, b0 = f.theta.astype(np.float64), f.momentum.astype(np.float64)
    plan = merge.merge_round(f, 3, weights, merge="avg", lr=0.7, momentum=0.9, restart=restart)
    cos = float(delta @ b0) / (np.linalg.norm(delta) * np.linalg.norm(b0))
    assert plan is not None and math.isclose(plan.momentum_cos, cos, rel_tol=1e-4) and (cos > 0) == (along > 0)
    keep = {"off": 1.0, "opposed": 0.0, "damped": 1.0 + cos}[restart] if along < 0 else 1.0
    assert plan.restarted == (keep < 1) and math.isclose(plan.keep_b, keep, rel_tol=1e-4)
    assert along > 0 or 0 < 1 + cos < 1, "the opposed case has a share of b strictly between 0 and 1 to keep"
    b = keep * 0.9 * b0 + delta
    theta = theta0 - 0.7 * (delta + 0.9 * b)
    np.testing.assert_allclose(f.momentum, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())
    np.testing.assert_allclose(f.theta, theta, rtol=1e-4, atol=1e-5 * np.abs(theta).max())
    assert math.isclose(f.momentum_sq, float(b @ b), rel_tol=1e-4), "|b|^2 is carried exactly by the step"


@pytest.mark.parametrize("threshold", [0.0, -0.5, -0.9])
def test_the_restart_drops_b_only_below_its_cos_threshold(threshold):
    """momentum_restart_cos: an opposed round (cos about -0.7 here) restarts only when its cos is below the threshold."""
    rng = np.random.default_rng(13)
    f, pushes = fragment(rng, 30_000, 3)
    weights = np.array([1.0, 2.0, 3.0])
    delta = reference(pushes, weights, "avg")
    noise = rng.standard_normal(delta.size)
    noise -= (noise @ delta) / (delta @ delta) * delta                     # orthogonal to delta
    f.rows[1] = (-delta / np.linalg.norm(delta) + noise / np.linalg.norm(noise)).astype(np.float32)   # cos -1/sqrt(2)
    f.momentum_sq = float(f.momentum.astype(np.float64) @ f.momentum.astype(np.float64))
    plan = merge.merge_round(f, 3, weights, merge="avg", lr=0.7, momentum=0.9, restart="opposed", restart_cos=threshold)
    assert plan is not None and math.isclose(plan.momentum_cos, -(0.5 ** 0.5), rel_tol=1e-3)
    assert plan.restarted == (threshold > -(0.5 ** 0.5))


def test_momentum_norm_is_carried_over_many_steps_and_cos_is_none_while_b_is_zero():
    rng = np.random.default_rng(12)
    f = rows.FragmentRows(rng.standard_normal(5000).astype(np.float32), slots=2)
    for step in range(12):
        for i in range(2):
            f.push(i)[:] = rng.standard_normal(5000).astype(np.float32) * 0.01 + 0.005
        plan = merge.merge_round(f, 2, [1.0, 1.0], merge="rda", lr=0.7, momentum=0.9, fraction=0.5 if step % 3 else 1.0,
                                 restart="opposed")
        assert plan is not None and (plan.momentum_cos is None) == (step == 0)
    b = f.momentum.astype(np.float64)
    assert math.isclose(f.momentum_sq, float(b @ b), rel_tol=1e-3)
    assert math.isclose(rows.FragmentRows(f.theta, f.momentum).momentum_sq, float(b @ b), rel_tol=1e-5), "restored"


def test_the_interval_fraction_is_the_weighted_steps_over_h():
    assert merge.interval_fraction([24, 24], [1, 1], 24) == 1.0
    assert merge.interval_fraction([30, 26], [1, 1], 24) == 1.0                # latency: capped at a whole interval
    assert merge.interval_fraction([2], [5.0], 24) == pytest.approx(2 / 24)    # a last partial interval
    assert merge.interval_fraction([1, 9], [3.0, 1.0], 24) == pytest.approx(3 / 24)
    assert merge.interval_fraction([0], [0.0], 24) == pytest.approx(1 / 24)    # never zero: at least one step


def test_token_squared_weighting_and_rda_fallback_when_directions_cancel():
    w = merge.push_weights([100, 400], [10, 20], [0, 0], weighting="tokens_sq_per_step")
    np.testing.assert_allclose(w, [1000.0, 8000.0])
    d = np.random.default_rng(0).standard_normal(1000)
    g = np.array([[d @ d, -(d @ d)], [-(d @ d), d @ d]])     # two opposite pushes
    assert merge.combination(g, [1.0, 1.0], "rda").merge == "avg-fallback"


def test_outer_step_equals_torch_sgd_nesterov_on_the_pseudo_gradient():
    rng = np.random.default_rng(3)
    n = 5000
    f = rows.FragmentRows(rng.standard_normal(n).astype(np.float32), slots=1)
    param = torch.nn.Parameter(torch.from_numpy(f.theta.copy()))
    sgd = torch.optim.SGD([param], lr=0.7, momentum=0.9, nesterov=True)
    for _ in range(5):
        d = (rng.standard_normal(n) * 0.01).astype(np.float32)
        f.push(0)[:] = d
        assert merge.merge_round(f, 1, [1.0], merge="avg", lr=0.7, momentum=0.9) is not None
        param.grad = torch.from_numpy(-d)                    # the pseudo-gradient Delta = -d
        sgd.step()
        np.testing.assert_allclose(f.theta, param.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("error")
def test_non_finite_push_or_overflow_aborts_without_touching_state():
    rng = np.random.default_rng(5)
    f, _ = fragment(rng, 70_000, 3)
    before = f.rows[:2].copy()
    f.push(1)[12345] = np.nan
    assert merge.merge_round(f, 3, [1, 1, 1], merge="rda", lr=0.7, momentum=0.9) is None
    assert f.rows[:2].tobytes() == before.tobytes()
    f.push(1)[12345] = 0.0
    f.rows[0, 50_000], f.rows[1, 50_000] = -3e38, 3e38      # the step overflows only there, late in the pass
    before = f.rows[:2].copy()
    assert merge.merge_round(f, 3, [1, 1, 1], merge="avg", lr=0.7, momentum=0.9, chunk=4096) is None
    assert f.rows[:2].tobytes() == before.tobytes()


def test_round_gram_built_push_by_push_equals_the_full_gram_pass_even_with_superseding_pushes():
    rng = np.random.default_rng(11)
    n = 3000
    frag = rows.FragmentRows(rng.standard_normal(n, dtype=np.float32), slots=2)
    rg, slots = gram.RoundGram(), {}
    for learner in ["a", "b", "a", "c", "b", "a"]:            # a and b push again before the merge
        k = len(slots)
        row = frag.push(k)
        row[:] = rng.standard_normal(n, dtype=np.float32)
        products = gram.gram_row(frag.rows[2:2 + k + 1], row, chunk=512)
        slot = slots.setdefault(learner, k)
        if slot != k:
            frag.push(slot)[:] = row
        rg.admit(slot, products)
    g, bd = rg.take(len(slots))
    np.testing.assert_allclose(g, gram.gram(frag.rows[2:2 + len(slots)]), rtol=1e-6)
    assert not bd.any(), "no momentum products were given"
    assert rg.take(0)[0].shape == (0, 0), "the next round starts over"


@pytest.mark.parametrize("codec", ["q4", "bf16", "f32"])
def test_row_products_taken_while_decoding_equal_the_gram_row_and_cover_every_value_once(codec):
    from yeto.schemas import codecs

    rng = np.random.default_rng(3)
    n = 700_001                                         # several q4 passes and a partial last block
    frag = rows.FragmentRows(rng.standard_normal(n, dtype=np.float32), slots=3)
    for i in range(2):
        frag.push(i)[:] = rng.standard_normal(n, dtype=np.float32)
    payload = codecs.codec(codec).encode(rng.standard_normal(n, dtype=np.float32))
    row, seen = frag.push(2), []
    acc = gram.RowProducts(frag.rows[2:5], row)

    def record(a, b):
        seen.append((a, b))
        acc(a, b)
    codecs.codec(codec).decode(payload, n, out=row, on_chunk=record)
    assert seen[0][0] == 0 and seen[-1][1] == n and all(b == c for (_, b), (c, _) in zip(seen, seen[1:]))
    np.testing.assert_allclose(acc.products, gram.gram_row(frag.rows[2:5], row), rtol=1e-5)
    np.testing.assert_array_equal(row, codecs.codec(codec).decode(payload, n))
