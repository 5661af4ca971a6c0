"""The merge math: push weights, avg and RDA as coefficients, and the fused Nesterov outer step.

Pushes carry d_m = theta_m - anchor; the pseudo-gradient is Delta_m = -d_m. Both merges are linear
combinations delta = sum_m k_m Delta_m, and the outer step is linear too:

    b'     = mu*b + delta                       = mu*b - sum k_m d_m
    theta' = theta - eta*(delta + mu*b')        = theta - eta*mu^2*b + eta*(1+mu)*sum k_m d_m

so a fragment keeps theta, b and its round's pushes as rows of one (2 + slots, n) f32 array and the
whole step is one small matrix product per cache-sized chunk: [theta'; b'] = C @ rows[:2+M, chunk].
A round that carries only a fraction f of an interval (a learner's last partial interval at the end of a run, a
first push at its offset) moves in token time: b' = mu^f b + delta, theta' = theta - eta (delta + f mu^f b'),
so its momentum extrapolation shrinks with its progress instead of repeating a whole interval's (f = 1: the above).
Each input is read once and theta, b written once; nothing grows with the fragment. The Gram matrix
G = [<d_i, d_j>] (services/syncer/gram.py, built row by row as pushes arrive) gives norms, RDA and finiteness.
All-or-nothing: pushes are checked finite through G, and the result is bounded from G and running
bounds of |theta|, |b| before anything is written; only when overflow cannot be ruled out does a dry
pass check the result first (docs/SYNC_MATH.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from yeto.services.syncer.backend import xp
from yeto.services.syncer.gram import gram
from yeto.services.syncer.rows import CHUNK, FragmentRows

RDA_MIN_COHERENCE = 1e-2              # |weighted sum of unit directions| below this: they cancel, use avg
SAFE_BOUND = 1e30                     # f32 overflows at 3.4e38; below this no outer step can overflow


def push_weights(tokens, steps, lags, *, weighting: str = "tokens", staleness_discount: float = 1.0) -> np.ndarray:
    """w_m = c_tokens (or c_tokens^2 / c_steps) times s^lag; float64."""
    tokens, steps, lags = (np.asarray(a, dtype=np.float64) for a in (tokens, steps, lags))
    base = tokens if weighting == "tokens" else tokens * tokens / np.maximum(steps, 1.0)
    return base * staleness_discount ** lags


@dataclass(frozen=True)
class Combination:
    """The linear combination delta = sum_m coeffs[m] * Delta_m, and what the round event reports."""

    coeffs: np.ndarray              # float64, applied to Delta_m = -d_m
    norms: np.ndarray               # ||d_m||
    delta_norm: float
    merge: str                      # rda | avg | avg-fallback


def combination(g: np.ndarray, weights, merge: str) -> Combination:
    """Coefficients of avg or RDA (ALGORITHM.md step 5) from the Gram matrix; pure float64 math."""
    w = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    norms = np.sqrt(np.maximum(np.diag(g), 0.0))
    avg = Combination(w, norms, math.sqrt(max(float(w @ g @ w), 0.0)), "avg")
    if merge == "avg":
        return avg
    c = np.divide(w, norms, out=np.zeros_like(w), where=norms > 0)   # weighted unit directions
    direction = math.sqrt(max(float(c @ g @ c), 0.0))
    if direction < RDA_MIN_COHERENCE * max(float(w[norms > 0].sum()), 1e-300):
        return Combination(avg.coeffs, norms, avg.delta_norm, "avg-fallback")
    radius = float(w @ norms)
    return Combination(c * (radius / direction), norms, radius, "rda")


def merge_round(frag: FragmentRows, num_pushes: int, weights, *, merge: str, lr: float, momentum: float,
                g: np.ndarray | None = None, chunk: int = CHUNK, fraction: float = 1.0) -> Combination | None:
    """Merge pushes 0..num_pushes-1 into the fragment with one outer step; None, state untouched, if not finite."""
    g = gram(frag.rows[2:2 + num_pushes]) if g is None else g
    if not np.isfinite(g).all():
        return None
    p = combination(g, weights, merge)
    return p if outer_step(frag, p, lr=lr, momentum=momentum, chunk=chunk, fraction=fraction) else None


def interval_fraction(c_steps, weights, inner_steps: int) -> float:
    """f in (0, 1]: the weighted mean of the pushes' steps since their anchors over H (1 for a whole interval)."""
    w = np.asarray(weights, dtype=np.float64)
    steps = float(np.asarray(c_steps, dtype=np.float64) @ w / w.sum()) if w.sum() > 0 else float(np.mean(c_steps))
    return min(1.0, max(steps, 1.0) / max(1, inner_steps))


def outer_step(frag: FragmentRows, p: Combination, *, lr: float, momentum: float, chunk: int = CHUNK,
               fraction: float = 1.0) -> bool:
    """Nesterov on delta = sum k_m Delta_m over `fraction` of an interval (token time: mu^f, look-ahead f mu^f);
    False, touching nothing, when the result would not be finite."""
    k = np.asarray(p.coeffs, dtype=np.float64)
    decay = momentum ** fraction                                # mu^f
    ahead = fraction * decay                                    # f mu^f: mu for a whole interval
    c = np.zeros((2, 2 + k.size))
    c[0, 0], c[0, 1], c[0, 2:] = 1.0, -lr * ahead * decay, lr * (1 + ahead) * k
    c[1, 1], c[1, 2:] = decay, -k
    delta_bound = float(np.sum(np.abs(k) * p.norms))          # |delta_i| <= sum |k_m| ||d_m||_2

    def bounds() -> tuple[float, float]:
        b = decay * frag.momentum_bound + delta_bound
        return frag.theta_bound + lr * (delta_bound + ahead * b), b

    new_theta, new_b = bounds()
    if not (new_theta < SAFE_BOUND and new_b < SAFE_BOUND):
        frag.refresh_bounds()                       # the running bounds may only be loose
        new_theta, new_b = bounds()
    if not (new_theta < SAFE_BOUND and new_b < SAFE_BOUND):
        if not _apply(frag, c, chunk, commit=False):
            return False
        _apply(frag, c, chunk, commit=True)
        frag.refresh_bounds()
        return True
    _apply(frag, c, chunk, commit=True)
    frag.theta_bound, frag.momentum_bound = new_theta, new_b
    return True


def _apply(frag: FragmentRows, c: np.ndarray, chunk: int, *, commit: bool) -> bool:
    rows, n = frag.rows[:c.shape[1]], frag.numel
    cmat = xp.asarray(c, dtype=xp.float32)
    out = xp.empty((2, min(chunk, n)), dtype=xp.float32)
    with np.errstate(over="ignore", invalid="ignore"):   # the dry pass looks for overflow on purpose
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            o = out[:, :stop - start]
            xp.matmul(cmat, rows[:, start:stop], out=o)
            if commit:
                rows[:2, start:stop] = o
            elif not bool(xp.isfinite(o).all()):
                return False
    return True
