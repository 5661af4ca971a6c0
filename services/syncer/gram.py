"""The Gram matrix of a round's pushes, G = [<d_i, d_j>]: norms, RDA coefficients and finiteness.

The syncer builds it one row per admitted push (`gram_row` over the rows already in, kept by `RoundGram`),
so by the time a round merges only the fused outer step is left (services/syncer/merge.py); `gram` is the
one-pass form over all rows at once. Each chunk's dot products are f32 (BLAS accumulates in f32 within a
chunk); the chunks' partial sums are added in float64, and G is a float64 array. On the CPU a row is folded by a
compiled kernel instead (`fold_row`): every f32 product is exact in float64 and summed there per 16K-value piece,
pieces in parallel, their sums added in order, so the result does not depend on the thread count.
"""
from __future__ import annotations

import numba
import numpy as np

from yeto.schemas.codecs.base import Codec, Payload, compiled, dot64, fused, pool
from yeto.services.syncer.backend import GPU

GRAM_CHUNK = 1 << 24 if GPU else 1 << 18  # gemv rows reuse the chunk from L2/L3


def gram(pushes, chunk: int = GRAM_CHUNK) -> np.ndarray:
    """G[i, j] = <d_i, d_j> over the rows of `pushes` (M, n), one chunked read pass (f32 per chunk, float64 across)."""
    num, n = pushes.shape
    g = np.zeros((num, num))
    with np.errstate(over="ignore", invalid="ignore"):   # a non-finite G is the answer, not an error
        for start in range(0, n, chunk):
            g += gram_block(pushes[:, start:start + chunk])
    return g


def gram_row(rows, row, chunk: int = GRAM_CHUNK) -> np.ndarray:
    """[<rows[i], row>], chunked like `gram` (f32 per chunk, float64 across): one row of G, computed as a
    push arrives so that the round's merge is left with the fused step alone."""
    acc = RowProducts(rows, row)
    for start in range(0, row.size, chunk):
        acc(start, min(start + chunk, row.size))
    return acc.products


class RowProducts:
    """`gram_row` computed piecewise, e.g. as a push is decoded (a codec's `decode`, its `on_chunk`): each stretch of
    the new row is multiplied with the rows already in while it is still in cache, so it is never read back."""

    def __init__(self, rows, row) -> None:
        self.rows, self.row = rows, row            # rows 0..k of the push buffer, the last being `row`
        self.products = np.zeros(rows.shape[0])

    def decode(self, codec: Codec, payload: Payload, numel: int) -> None:
        """Decode `payload` into the row with its products on the way: on the CPU, a codec with a compiled
        `decode_fold` (q4) decodes each PIECE and folds it in one parallel pass (the same bits as `fold_row`);
        any other decode calls this object per stretch."""
        one_pass = getattr(codec, "decode_fold", None) if fused() else None
        if one_pass is None or GPU:
            codec.decode(payload, numel, out=self.row, on_chunk=self)
            return
        _add_in_order(one_pass(payload, numel, self.row, self.rows, PIECE), self.products)

    def __call__(self, start: int, stop: int) -> None:
        if not GPU and compiled():
            fold_row(self.rows, self.row, start, stop, self.products)
            return
        with np.errstate(over="ignore", invalid="ignore"):   # a non-finite product is the answer, not an error
            part = self.rows[:, start:stop] @ self.row[start:stop]
            self.products += part.get() if GPU else part


class RoundGram:
    """G of one round's pushes, by slot, grown one row per admitted push (a superseding push replaces its slot's),
    and each push's product with the momentum b, <d_m, b> (b does not change while a round is open)."""

    def __init__(self) -> None:
        self.g, self.bd = np.zeros((0, 0)), np.zeros(0)

    def admit(self, slot: int, products: np.ndarray, momentum_product: float = 0.0) -> None:
        """`products` = gram_row over rows 0..k of the push buffer for a push decoded into row k; it lands in `slot`."""
        k = products.size - 1
        size = max(slot + 1, self.g.shape[0])
        if size > self.g.shape[0]:
            grown = np.zeros((size, size))
            grown[:self.g.shape[0], :self.g.shape[0]] = self.g
            self.g, self.bd = grown, np.concatenate([self.bd, np.zeros(size - self.bd.size)])
        others = [j for j in range(k) if j != slot]
        self.g[slot, others] = self.g[others, slot] = products[others]
        self.g[slot, slot] = products[k]
        self.bd[slot] = momentum_product

    def take(self, num: int) -> tuple[np.ndarray, np.ndarray]:
        """The matrix of slots 0..num-1 and their products with b, for the merge; the round's Gram starts over."""
        g, bd = self.g[:num, :num], self.bd[:num]
        self.g, self.bd = np.zeros((0, 0)), np.zeros(0)
        return g, bd


def gram_block(block) -> np.ndarray:
    if GPU:
        return (block @ block.T).get().astype(np.float64)
    num = block.shape[0]
    g = np.empty((num, num))
    for i in range(num):      # one gemv per row beats a thin sgemm, which packs (copies) its operands
        g[i, i:] = block[i:] @ block[i]
        g[i:, i] = g[i, i:]
    return g


PIECE = 1 << 14                   # values per partial sum: 64 KiB of the new row, read once per row from L1/L2
BAND = 1 << 20                    # values per parallel call (a multiple of PIECE; measured 2026-12-05, see fold_row)


def fold_row(rows, row, start: int, stop: int, products: np.ndarray) -> None:
    """products[i] += <rows[i, start:stop], row[start:stop]>, in float64, pieces in parallel and added in order
    (`start` a multiple of PIECE, so a row folded in any stretches gives the same bits)."""
    for lo in range(start, stop, BAND):      # one call over a whole 16M-value row ran 6x slower than bands of it
        hi = min(lo + BAND, stop)
        partials = np.empty((-(-(hi - lo) // PIECE), rows.shape[0]))
        with pool():
            _piece_products(rows, row, lo, hi, partials)
        _add_in_order(partials, products)


@numba.njit(nogil=True, cache=True, parallel=True)
def _piece_products(rows, row, start, stop, partials):  # pragma: no cover - compiled
    for p in numba.prange(partials.shape[0]):
        lo = start + p * PIECE
        hi = min(lo + PIECE, stop)
        for r in range(rows.shape[0]):
            partials[p, r] = dot64(rows[r, lo:hi], row[lo:hi])


@numba.njit(nogil=True, cache=True)
def _add_in_order(partials, products):  # pragma: no cover - compiled
    for p in range(partials.shape[0]):
        for r in range(partials.shape[1]):
            products[r] += partials[p, r]
