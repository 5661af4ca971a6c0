"""A push from a sparse codec (topk2/4/8) kept as (indices, values): its Gram row and its share of the outer step
without a dense row per push.

A sparse push touches ~k/64 of the values. Decoding it into a dense row and reading that row twice (its Gram row,
then the fused outer step of services/syncer/merge.py) makes the round cost scale with the fragment, not with what
was sent. Here the codec's `decode_entries` gives the push's indices (ascending, unique), values and where each
64-value chunk's entries begin, and:
 - its products with the rows already in (`products`): with the momentum b and any dense push by a gather, with
   an earlier sparse push by joining the two index lists chunk by chunk, with itself from its values; every f32 product
   exact in float64 and summed there (only the order of the sum differs from gram.py's pieces);
 - its share of the outer step: the step kernel (merge.py `_step_pieces`) adds, to each piece's float64 sums of θ
   and b, c_m * v for the push's entries in that piece (`starts`: where each piece's entries begin), in slot order,
   and skips the push's dense row. The dense path adds c_m * 0 for every other value, which leaves a float64 sum
   unchanged, so the step gives the same f32 bits as decoding densely, given the same coefficients.
On the GPU, or with kernels other than "compiled", the pushes are written densely into their rows before the step
(`FragmentRows.densify`), as are those of a round that also holds a dense push when it arrives (rows.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from yeto.schemas.codecs.base import Codec, compiled
from yeto.services.syncer.backend import GPU

STEP_PIECE = 1 << 9               # merge.py's piece of the step: `starts` is indexed by it (asserted there)


_switch = {"on": True}


def use_sparse_merge(on: bool) -> None:
    """Whether sparse pushes stay (indices, values) (the default) or are decoded densely as before 2026-12-05; the two
    give the same merged Θ (benchmarks/round_sparse.py compares them in one run)."""
    _switch["on"] = bool(on)


def sparse_merge(codec: Codec) -> bool:
    """Whether a push of `codec` is taken in as (indices, values): a sparse codec, on the CPU, with compiled kernels."""
    return _switch["on"] and not GPU and compiled() and hasattr(codec, "decode_entries")


@dataclass
class SparsePush:
    """One decoded sparse push: `idx` int64 ascending and unique, `vals` f32 (all other values are 0), `chunks`: the
    codec's chunk c (64 values) holds entries chunks[c]..chunks[c+1]-1."""

    idx: np.ndarray
    vals: np.ndarray
    chunks: np.ndarray

    def starts(self, numel: int) -> np.ndarray:
        """starts[p]: the first entry at or past piece p of the step (one past the last piece: the entry count)."""
        return np.searchsorted(self.idx, np.arange(-(-numel // STEP_PIECE) + 1, dtype=np.int64) * STEP_PIECE)

    def scatter(self, row) -> None:
        """Write the push densely into `row` (zeros elsewhere)."""
        row[:] = 0
        row[self.idx] = self.vals


def products(push: SparsePush, dense: list, sparse: list) -> np.ndarray:
    """[<r, push>] for the rows in: `dense` and `sparse` are the earlier rows in order (b first, then the round's
    push buffer), each either a dense f32 row (`dense[i]`, `sparse[i]` None) or a SparsePush; the last is `push`."""
    out = np.zeros(len(dense) + 1)
    with np.errstate(over="ignore", invalid="ignore"):
        for i, (row, other) in enumerate(zip(dense, sparse)):
            out[i] = _join_dot(other.chunks, other.idx, other.vals, push.chunks, push.idx, push.vals) \
                if other is not None else _gather_dot(row, push.idx, push.vals)
        out[-1] = _self_dot(push.vals)
    return out


@numba.njit(nogil=True, cache=True)
def _gather_dot(row, idx, vals):  # pragma: no cover - compiled
    acc = 0.0
    for j in range(idx.size):
        acc += np.float64(row[idx[j]]) * np.float64(vals[j])
    return acc


@numba.njit(nogil=True, cache=True)
def _self_dot(vals):  # pragma: no cover - compiled
    acc = 0.0
    for j in range(vals.size):
        acc += np.float64(vals[j]) * np.float64(vals[j])
    return acc


@numba.njit(nogil=True, cache=True)
def _join_dot(sa, ia, va, sb, ib, vb):  # pragma: no cover - compiled
    """<a, b> over the indices both hold, chunk by chunk (k x k compares: 1.6x a merge-join of the whole lists,
    measured), in ascending index order."""
    acc = 0.0
    for c in range(min(sa.size, sb.size) - 1):
        for j in range(sb[c], sb[c + 1]):
            for i in range(sa[c], sa[c + 1]):
                if ia[i] == ib[j]:
                    acc += np.float64(va[i]) * np.float64(vb[j])
    return acc
