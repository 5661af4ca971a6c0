"""The merge math: token/staleness weights, avg and RDA as coefficients, and the fused Nesterov outer step.

Pushes carry d_m = theta_m - anchor; the pseudo-gradient is Delta_m = -d_m. Both merges are linear
combinations delta = sum_m k_m Delta_m, so the hot path is one fused, chunked pass for any merge:

    pass 1 (gram):  G = [<d_i, d_j>] in float64   reads the M pushes; gives norms, RDA and finiteness
    pass 2 (step):  acc = sum_m k_m d_m; b = mu*b + acc; theta -= eta*(acc + mu*b)
                    reads M pushes, theta and b once, writes theta and b once

Both passes walk cache-sized chunks with in-place ufuncs, so no temporary grows with the fragment.
All-or-nothing: the pushes are checked finite by pass 1 and the outer step's result is bounded from
G and the running bounds of |theta| and |b| before anything is written; only when the bound cannot
rule out overflow does a dry pass check the result first (docs/SYNC_MATH.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from yeto.services.syncer.backend import to_host, xp

CHUNK = 1 << 15                    # 32K f32 values = 128 KiB per array: the pass's working set stays in L2
RDA_MIN_COHERENCE = 1e-2           # |sum of weighted unit directions| below this: directions cancel, use avg
SAFE_BOUND = 1e30                  # f32 overflows at 3.4e38; below this no outer step can overflow


def push_weights(tokens, steps, lags, *, weighting: str = "tokens", staleness_discount: float = 1.0) -> np.ndarray:
    """w_m = c_tokens (or c_tokens^2 / c_steps) times s^lag; float64."""
    tokens, steps, lags = (np.asarray(a, dtype=np.float64) for a in (tokens, steps, lags))
    base = tokens if weighting == "tokens" else tokens * tokens / np.maximum(steps, 1.0)
    return base * staleness_discount ** lags


def gram(pushes: list, chunk: int = CHUNK) -> np.ndarray:
    """G[i, j] = <d_i, d_j> in float64 over the pushes, one chunked read pass."""
    num, n = len(pushes), pushes[0].size
    g = np.zeros((num, num))
    stacked = xp.empty((num, min(chunk, n)), dtype=xp.float32)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        block = stacked[:, :stop - start]
        for m, d in enumerate(pushes):
            block[m] = d[start:stop]
        g += to_host(block @ block.T).astype(np.float64)   # one sgemm per chunk; f32 within a chunk only
    return g


@dataclass(frozen=True)
class Plan:
    """The linear combination delta = sum_m coeffs[m] * Delta_m, and what the round event reports."""

    coeffs: np.ndarray              # float64, applied to Delta_m = -d_m
    norms: np.ndarray               # ||d_m||, float64
    delta_norm: float
    merge: str                      # rda | avg | avg-fallback


def plan(g: np.ndarray, weights, merge: str) -> Plan:
    """Coefficients of avg or RDA (ALGORITHM.md step 5) from the Gram matrix; pure float64 math."""
    w = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    norms = np.sqrt(np.maximum(np.diag(g), 0.0))
    avg = Plan(w, norms, math.sqrt(max(float(w @ g @ w), 0.0)), "avg")
    if merge == "avg":
        return avg
    c = np.divide(w, norms, out=np.zeros_like(w), where=norms > 0)   # weighted unit directions
    direction = math.sqrt(max(float(c @ g @ c), 0.0))
    if direction < RDA_MIN_COHERENCE * max(float(w[norms > 0].sum()), 1e-300):
        return Plan(avg.coeffs, norms, avg.delta_norm, "avg-fallback")
    radius = float(w @ norms)
    return Plan(c * (radius / direction), norms, radius, "rda")


@dataclass
class OuterState:
    """A fragment's f32 global values and Nesterov buffer, with upper bounds of their absolute values."""

    theta: object
    momentum: object
    theta_bound: float = math.inf
    momentum_bound: float = math.inf

    def refresh_bounds(self) -> None:
        self.theta_bound, self.momentum_bound = absmax(self.theta), absmax(self.momentum)


def absmax(a, chunk: int = CHUNK) -> float:
    """max |a| in one chunked pass (no whole-array temporary); inf if a holds a NaN."""
    top = 0.0
    for start in range(0, a.size, chunk):
        part = a[start:start + chunk]
        top = max(top, float(part.max()), -float(part.min()))
        if top != top:
            return math.inf
    return top


def merge_round(state: OuterState, pushes: list, weights, *, merge: str, lr: float, momentum: float,
                chunk: int = CHUNK) -> Plan | None:
    """Merge the pushes into the fragment with one outer step; None (state untouched) if not finite."""
    g = gram(pushes, chunk)
    if not np.isfinite(g).all():
        return None
    p = plan(g, weights, merge)
    return p if outer_step(state, pushes, p, lr=lr, momentum=momentum, chunk=chunk) else None


def outer_step(state: OuterState, pushes: list, p: Plan, *, lr: float, momentum: float, chunk: int = CHUNK) -> bool:
    """Apply delta = sum k_m Delta_m with Nesterov: b <- mu b + delta; theta <- theta - lr (delta + mu b).

    Returns False, touching nothing, when the result would not be finite."""
    delta_bound = float(np.sum(np.abs(p.coeffs) * p.norms))       # |delta_i| <= sum |k_m| ||d_m||_2

    def bounds() -> tuple[float, float]:
        b = momentum * state.momentum_bound + delta_bound
        return state.theta_bound + lr * (delta_bound + momentum * b), b

    new_theta, new_b = bounds()
    if not (new_theta < SAFE_BOUND and new_b < SAFE_BOUND):
        state.refresh_bounds()                      # the running bounds may just be loose
        new_theta, new_b = bounds()
        if not (new_theta < SAFE_BOUND and new_b < SAFE_BOUND):
            if not _fused(state, pushes, p.coeffs, lr, momentum, chunk, commit=False):
                return False
            _fused(state, pushes, p.coeffs, lr, momentum, chunk, commit=True)
            state.refresh_bounds()
            return True
    _fused(state, pushes, p.coeffs, lr, momentum, chunk, commit=True)
    state.theta_bound, state.momentum_bound = new_theta, new_b
    return True


def _fused(state: OuterState, pushes, coeffs, lr: float, momentum: float, chunk: int, *, commit: bool) -> bool:
    theta, b, n = state.theta, state.momentum, state.theta.size
    k = [np.float32(-c) for c in coeffs]           # Delta_m = -d_m: fold the sign into the coefficients
    acc, tmp, new_b = (xp.empty(min(chunk, n), dtype=xp.float32) for _ in range(3))
    mu, eta = np.float32(momentum), np.float32(lr)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        a, t, s = acc[:stop - start], tmp[:stop - start], slice(start, stop)
        xp.multiply(pushes[0][s], k[0], out=a)
        for d, km in zip(pushes[1:], k[1:]):
            xp.multiply(d[s], km, out=t)
            a += t
        bs = b[s] if commit else new_b[:stop - start]
        if commit:
            bs *= mu
        else:
            xp.multiply(b[s], mu, out=bs)
        bs += a                                     # b <- mu b + delta
        xp.multiply(bs, mu, out=t)
        t += a
        t *= eta
        if commit:
            theta[s] -= t                           # theta <- theta - eta (delta + mu b)
        else:
            xp.subtract(theta[s], t, out=t)
            if not (bool(xp.isfinite(t).all()) and bool(xp.isfinite(bs).all())):
                return False
    return True
