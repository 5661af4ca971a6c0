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
Adaptive restart (SyncConfig.momentum_restart = opposed): when the round's delta points against the momentum,
<delta, b> = -sum k_m <d_m, b> < 0, b is dropped first (mu^f b -> 0): the learners walked back from where the
look-ahead was carrying theta. <d_m, b> comes with each push's row of G (row 1 is read with the pushes), and
|b|^2 is carried exactly (|b'|^2 = mu^2f |b|^2 + 2 mu^f <delta, b> + |delta|^2), so cos(delta, b) is reported for
every round at no extra pass. momentum_restart = damped scales b by 1 + cos(delta, b) instead (an opposed round
keeps the part of b the round did not walk back: cos -1 drops it, cos near 0 keeps nearly all of it).
Each input is read once and theta, b written once; nothing grows with the fragment. The Gram matrix
G = [<d_i, d_j>] (services/syncer/gram.py, built row by row as pushes arrive) gives norms, RDA and finiteness.
All-or-nothing: pushes are checked finite through G, and the result is bounded from G and running
bounds of |theta|, |b| before anything is written; only when overflow cannot be ruled out does a dry
pass check the result first (docs/SYNC_MATH.md).
On the CPU the step is a compiled kernel (`_step_pieces`): pieces of the rows in parallel, each value's
combination summed in float64 from float64 coefficients and rounded once to f32 (the matmul it replaced rounded
the coefficients to f32 and summed in f32), so the result is closer to the float64 reference and the same bits
whatever the thread count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numba
import numpy as np

from yeto.schemas.codecs.base import compiled, pool
from yeto.schemas.codecs.q4 import decode_piece
from yeto.services.syncer import sparse
from yeto.services.syncer.backend import GPU, xp
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
    momentum_cos: float | None = None   # cos(delta, b) before the step; None while b or delta is zero
    keep_b: float = 1.0             # the share of mu^f b carried into the step: 0 restarted, 1 + cos damped, else 1

    @property
    def restarted(self) -> bool:
        """b was cut before the step (dropped by opposed, scaled down by damped)."""
        return self.keep_b < 1.0


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
                g: np.ndarray | None = None, bd: np.ndarray | None = None, chunk: int = CHUNK, fraction: float = 1.0,
                restart: str = "off", restart_cos: float = 0.0) -> Combination | None:
    """Merge pushes 0..num_pushes-1 into the fragment with one outer step; None, state untouched, if not finite.
    `g` is the pushes' Gram matrix and `bd` their products with b, [<d_m, b>] (both computed here when not given)."""
    if g is None or bd is None:
        frag.densify()
        full = gram(frag.rows[1:2 + num_pushes])
        g, bd = full[1:, 1:], full[0, 1:]
    if not (np.isfinite(g).all() and np.isfinite(bd).all()):
        return None
    p = combination(g, weights, merge)
    delta_b = -float(np.asarray(p.coeffs, dtype=np.float64) @ np.asarray(bd, dtype=np.float64))   # <delta, b>
    norms = p.delta_norm * math.sqrt(max(frag.momentum_sq, 0.0))
    cos = delta_b / norms if norms > 0 else None
    p = replace(p, momentum_cos=cos, keep_b=keep_share(restart, cos, delta_b, momentum, restart_cos))
    return p if outer_step(frag, p, lr=lr, momentum=momentum, chunk=chunk, fraction=fraction, delta_b=delta_b) else None


def keep_share(restart: str, cos: float | None, delta_b: float, momentum: float, restart_cos: float = 0.0) -> float:
    """What of mu^f b goes into the step: 1 unless delta opposes b (<delta, b> < 0) and the restart is on; then
    0 (opposed, when cos < restart_cos) or 1 + cos (damped)."""
    if restart == "off" or momentum <= 0 or not delta_b < 0:
        return 1.0
    if restart == "damped":
        return min(1.0, max(0.0, 1.0 + cos)) if cos is not None else 1.0
    return 0.0 if cos is None or cos < restart_cos else 1.0


def interval_fraction(c_steps, weights, inner_steps: int) -> float:
    """f in (0, 1]: the weighted mean of the pushes' steps since their anchors over H (1 for a whole interval)."""
    w = np.asarray(weights, dtype=np.float64)
    steps = float(np.asarray(c_steps, dtype=np.float64) @ w / w.sum()) if w.sum() > 0 else float(np.mean(c_steps))
    return min(1.0, max(steps, 1.0) / max(1, inner_steps))


def outer_step(frag: FragmentRows, p: Combination, *, lr: float, momentum: float, chunk: int = CHUNK,
               fraction: float = 1.0, delta_b: float) -> bool:
    """Nesterov on delta = sum k_m Delta_m over `fraction` of an interval (token time: mu^f, look-ahead f mu^f),
    b scaled by `p.keep_b` first (0: dropped); False, touching nothing, when the result would not be finite.
    `delta_b` = <delta, b> keeps |b|^2 exact."""
    k = np.asarray(p.coeffs, dtype=np.float64)
    decay = momentum ** fraction                                # mu^f
    ahead = fraction * decay                                    # f mu^f: mu for a whole interval
    keep = p.keep_b * decay                                     # what of b goes on into b'
    c = np.zeros((2, 2 + k.size))
    c[0, 0], c[0, 1], c[0, 2:] = 1.0, -lr * ahead * keep, lr * (1 + ahead) * k
    c[1, 1], c[1, 2:] = keep, -k
    delta_bound = float(np.sum(np.abs(k) * p.norms))          # |delta_i| <= sum |k_m| ||d_m||_2

    def bounds() -> tuple[float, float]:
        b = keep * frag.momentum_bound + delta_bound
        return frag.theta_bound + lr * (delta_bound + ahead * b), b

    new_theta, new_b = bounds()
    if not (new_theta < SAFE_BOUND and new_b < SAFE_BOUND):
        frag.refresh_bounds()                       # the running bounds may only be loose
        new_theta, new_b = bounds()
    momentum_sq = max(keep * keep * frag.momentum_sq + 2 * keep * delta_b + p.delta_norm ** 2, 0.0)
    if not (new_theta < SAFE_BOUND and new_b < SAFE_BOUND):
        if not _apply(frag, c, chunk, commit=False):
            return False
        _apply(frag, c, chunk, commit=True)
        frag.refresh_bounds()
        frag.momentum_sq = momentum_sq
        return True
    _apply(frag, c, chunk, commit=True)
    frag.theta_bound, frag.momentum_bound, frag.momentum_sq = new_theta, new_b, momentum_sq
    return True


def _apply(frag: FragmentRows, c: np.ndarray, chunk: int, *, commit: bool) -> bool:
    n = frag.numel
    if not GPU and compiled():
        finite = np.ones(-(-n // STEP_PIECE), dtype=np.bool_)
        coeffs, band = np.ascontiguousarray(c, dtype=np.float64), STEP_BAND // STEP_PIECE
        entries = _entries(frag, c.shape[1] - 2)
        for first in range(0, finite.size, band):       # bands: one call over a 16M-value row ran slower (gram.py)
            with pool():
                _step_pieces(frag.rows, coeffs, commit, finite, first, min(first + band, finite.size), *entries, STEP_DECODE)
        return bool(finite.all())
    frag.densify()
    rows = frag.rows[:c.shape[1]]
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


def _entries(frag: FragmentRows, num: int) -> tuple[object, ...]:
    """The sparse pushes among slots 0..num-1 for the step kernel: dense[m] (row 2+m is read), their (idx, vals) as
    typed lists by slot (an empty pair for a dense slot; no copy of the entries) and starts[m, p], where slot m's
    entries of piece p begin (services/syncer/sparse.py); then slot_of[m], the row of `encoded` that holds a dense
    push kept encoded (decoded piece by piece in the step; -1: row 2+m is read), and `encoded`."""
    dense = np.array([m not in frag.sparse for m in range(num)], dtype=np.bool_)
    kept = frag.kept_of(num)                                            # read where a push is kept encoded (rows.py)
    slot_of, encoded = (kept[0][1:], kept[1]) if kept is not None else (np.full(num, -1, dtype=np.int64), _NO_BYTES)
    pieces = -(-frag.numel // STEP_PIECE) + 1 if frag.sparse else 1     # read only for a sparse slot
    starts = np.zeros((num, pieces), dtype=np.int64)
    idx, vals = numba.typed.List.empty_list(numba.int64[::1]), numba.typed.List.empty_list(numba.float32[::1])
    for m in range(num):
        push = frag.sparse.get(m)
        if push is not None:
            starts[m] = push.starts(frag.numel)
        idx.append(push.idx if push is not None else _NO_IDX)
        vals.append(push.vals if push is not None else _NO_VALS)
    return dense, idx, vals, starts, slot_of, encoded


_NO_IDX, _NO_VALS = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
_NO_BYTES = np.zeros((0, 0), dtype=np.uint8)


STEP_PIECE = 1 << 9               # values per piece of the step: its two float64 sums stay in L1 (4K measured slower)
assert STEP_PIECE == sparse.STEP_PIECE        # a sparse push's `starts` are by the step's pieces
STEP_GROUP = 64                   # pieces per parallel task (32K values)
STEP_DECODE = 8                   # pieces of the kept pushes decoded per call (4K values; 16 KiB a push, in L1/L2)
STEP_BAND = 1 << 20               # values per parallel call


# Each inner loop is its own function on 1-D contiguous slices: that is what lets LLVM vectorize it (inlined into the
# piece loop, the slices' possible overlap kept it scalar, 5x slower).
@numba.njit(nogil=True, cache=True, parallel=True)
def _step_pieces(rows, c, commit, finite, first, stop, dense, idx, vals, starts, slot_of, encoded,
                 decode_pieces):  # pragma: no cover - compiled
    """[theta'; b'] = c @ rows[:c.shape[1]] over pieces first..stop-1, written to rows 0 and 1 when `commit`, else
    only checked: finite[p] is False when piece p's result is not finite in f32. A slot m with dense[m] False is
    a sparse push: its entries starts[m, p]..starts[m, p+1]-1 of (idx[m], vals[m]) are added instead of row 2+m.
    A dense slot m with slot_of[m] >= 0 is kept encoded: `decode_pieces` pieces of it at a time (STEP_DECODE) are
    decoded from encoded[slot_of[m]] into a scratch row in cache (q4 `decode_piece`: the same values) and read there
    instead of row 2+m (one call per piece made the step 1.10x slower at 64M values on one thread: 187.1 against
    170.1 ms of CPU, benchmarks/results/round/norm-2026-12-06/micro_merge_64M.txt).
    Groups of STEP_GROUP pieces run in parallel, each reusing one pair of float64 scratch rows (one allocation per
    piece cost ~15% of the step)."""
    n = rows.shape[1]
    num = c.shape[1] - 2
    for g in numba.prange(-(-(stop - first) // STEP_GROUP)):
        theta, b = np.empty(STEP_PIECE), np.empty(STEP_PIECE)
        decoded = np.empty((num, STEP_PIECE * decode_pieces), dtype=np.float32)
        group_stop = min(first + g * STEP_GROUP + STEP_GROUP, stop)
        at = 0                                          # the first value of what `decoded` holds
        for p in range(first + g * STEP_GROUP, group_stop):
            lo = p * STEP_PIECE
            hi = min(lo + STEP_PIECE, n)
            t, u = theta[:hi - lo], b[:hi - lo]
            if (p - first - g * STEP_GROUP) % decode_pieces == 0:     # the kept pushes' next pieces
                at = lo
                upto = min(lo + STEP_PIECE * decode_pieces, group_stop * STEP_PIECE, n)
                for k in range(num):
                    if slot_of[k] >= 0:
                        decode_piece(encoded[slot_of[k]], n, lo, upto, decoded[k])
            m, last = 2, c.shape[1]
            if last == 6 and dense[0] and dense[1] and dense[2] and dense[3]:    # four pushes: one pass, no scratch
                finite[p] = _six_rows_out(rows[0, lo:hi], rows[1, lo:hi], _row(rows, decoded, slot_of, 0, lo, hi, at),
                                          _row(rows, decoded, slot_of, 1, lo, hi, at),
                                          _row(rows, decoded, slot_of, 2, lo, hi, at),
                                          _row(rows, decoded, slot_of, 3, lo, hi, at), c[0, 0], c[0, 1], c[0, 2], c[0, 3],
                                          c[0, 4], c[0, 5], c[1, 0], c[1, 1], c[1, 2], c[1, 3], c[1, 4], c[1, 5], commit) == 0
                continue
            if last > 3 and dense[0] and dense[1]:              # theta, b and two pushes in one pass
                _four_rows(rows[0, lo:hi], rows[1, lo:hi], _row(rows, decoded, slot_of, 0, lo, hi, at),
                           _row(rows, decoded, slot_of, 1, lo, hi, at), t, u, c[0, 0], c[0, 1],
                           c[1, 0], c[1, 1], c[0, 2], c[1, 2], c[0, 3], c[1, 3])
                m = 4
            else:
                _two_rows(rows[0, lo:hi], rows[1, lo:hi], t, u, c[0, 0], c[0, 1], c[1, 0], c[1, 1])
            while m < last:
                if m + 2 == last and dense[m - 2] and dense[m - 1]:     # the last two rows: added, rounded and stored
                    finite[p] = _add_two_rows_out(_row(rows, decoded, slot_of, m - 2, lo, hi, at),
                                                  _row(rows, decoded, slot_of, m - 1, lo, hi, at), t, u, c[0, m], c[1, m],
                                                  c[0, m + 1], c[1, m + 1], rows[0, lo:hi], rows[1, lo:hi], commit) == 0
                    break
                if m + 1 < last and dense[m - 2] and dense[m - 1]:     # two rows in one pass over the scratch
                    _add_two_rows(_row(rows, decoded, slot_of, m - 2, lo, hi, at),
                                  _row(rows, decoded, slot_of, m - 1, lo, hi, at), t, u, c[0, m], c[1, m],
                                  c[0, m + 1], c[1, m + 1])
                    m += 2
                    continue
                if dense[m - 2]:
                    _add_row(_row(rows, decoded, slot_of, m - 2, lo, hi, at), t, u, c[0, m], c[1, m])
                else:
                    _add_entries(idx[m - 2], vals[m - 2], starts[m - 2, p], starts[m - 2, p + 1], lo, t, u, c[0, m], c[1, m])
                m += 1
            else:                                   # no break: the last rows went through the scratch, not stored yet
                finite[p] = _num_non_finite(t, u) == 0
                if commit:
                    _store(t, rows[0, lo:hi])
                    _store(u, rows[1, lo:hi])


@numba.njit(nogil=True, cache=True, inline="always")
def _row(rows, decoded, slot_of, k, lo, hi, at):  # pragma: no cover - compiled
    """Values lo..hi-1 of push k: from its decoded pieces (which begin at value `at`) when it is kept encoded, else its
    row 2+k."""
    if slot_of[k] >= 0:
        return decoded[k, lo - at:hi - at]
    return rows[2 + k, lo:hi]


@numba.njit(nogil=True, cache=True, inline="never")
def _two_rows(x0, x1, theta, b, c00, c01, c10, c11):  # pragma: no cover - compiled
    for i in range(theta.size):
        a, d = np.float64(x0[i]), np.float64(x1[i])
        theta[i] = c00 * a + c01 * d
        b[i] = c10 * a + c11 * d


@numba.njit(nogil=True, cache=True, inline="never")
def _add_row(x, theta, b, c0, c1):  # pragma: no cover - compiled
    for i in range(theta.size):
        d = np.float64(x[i])
        theta[i] += c0 * d
        b[i] += c1 * d


@numba.njit(nogil=True, cache=True, inline="never")
def _four_rows(x0, x1, x, y, theta, b, c00, c01, c10, c11, c0, c1, d0, d1):  # pragma: no cover - compiled
    """`_two_rows`, then `_add_row` of x and of y, in one pass: the same additions in the same order (the same bits)."""
    for i in range(theta.size):
        a, f, d, e = np.float64(x0[i]), np.float64(x1[i]), np.float64(x[i]), np.float64(y[i])
        theta[i] = ((c00 * a + c01 * f) + c0 * d) + d0 * e
        b[i] = ((c10 * a + c11 * f) + c1 * d) + d1 * e


@numba.njit(nogil=True, cache=True, inline="never")
def _add_two_rows(x, y, theta, b, c0, c1, d0, d1):  # pragma: no cover - compiled
    """`_add_row` of x, then of y, in one pass over the scratch rows: the same additions in the same order (the same
    bits), half the scratch's loads and stores."""
    for i in range(theta.size):
        d, e = np.float64(x[i]), np.float64(y[i])
        theta[i] = (theta[i] + c0 * d) + d0 * e
        b[i] = (b[i] + c1 * d) + d1 * e


@numba.njit(nogil=True, cache=True, inline="never")
def _add_two_rows_out(x, y, theta, b, c0, c1, d0, d1, out_theta, out_b, commit):  # pragma: no cover - compiled
    """`_add_two_rows`, then `_num_non_finite` and (when `commit`) `_store` of both, in one pass: the same additions
    and roundings (the same bits); returns how many values are not finite."""
    bad = 0
    for i in range(theta.size):
        d, e = np.float64(x[i]), np.float64(y[i])
        t, u = np.float32((theta[i] + c0 * d) + d0 * e), np.float32((b[i] + c1 * d) + d1 * e)
        bad += np.int64(not (t - t == 0)) + np.int64(not (u - u == 0))
        if commit:
            out_theta[i], out_b[i] = t, u
    return bad


@numba.njit(nogil=True, cache=True, inline="never")
def _six_rows_out(theta, b, x, y, z, w, k0, k1, k2, k3, k4, k5, j0, j1, j2, j3, j4, j5, commit):  # pragma: no cover
    """Four dense pushes: `_four_rows`, `_add_two_rows` and `_add_two_rows_out` in one pass with no scratch, theta and b
    rewritten in place when `commit` (each value read before it is written): the same additions in the same order
    (the same bits); returns how many values are not finite."""
    bad = 0
    for i in range(theta.size):
        a, f, d, e = np.float64(theta[i]), np.float64(b[i]), np.float64(x[i]), np.float64(y[i])
        g, h = np.float64(z[i]), np.float64(w[i])
        t = np.float32(((((k0 * a + k1 * f) + k2 * d) + k3 * e) + k4 * g) + k5 * h)
        u = np.float32(((((j0 * a + j1 * f) + j2 * d) + j3 * e) + j4 * g) + j5 * h)
        bad += np.int64(not (t - t == 0)) + np.int64(not (u - u == 0))
        if commit:
            theta[i], b[i] = t, u
    return bad


@numba.njit(nogil=True, cache=True, inline="never")
def _add_entries(idx, vals, begin, end, lo, theta, b, c0, c1):  # pragma: no cover - compiled
    """A sparse push's entries begin..end-1 (all in the piece starting at value `lo`): what `_add_row` adds there."""
    for j in range(begin, end):
        d = np.float64(vals[j])
        theta[idx[j] - lo] += c0 * d
        b[idx[j] - lo] += c1 * d


@numba.njit(nogil=True, cache=True, inline="never")
def _num_non_finite(theta, b):  # pragma: no cover - compiled
    """How many values are not finite once rounded to f32 (x - x is 0 only for a finite x)."""
    bad = 0
    for i in range(theta.size):
        t, u = np.float32(theta[i]), np.float32(b[i])
        bad += np.int64(not (t - t == 0)) + np.int64(not (u - u == 0))
    return bad


@numba.njit(nogil=True, cache=True, inline="never")
def _store(values, row):  # pragma: no cover - compiled
    for i in range(values.size):
        row[i] = np.float32(values[i])
