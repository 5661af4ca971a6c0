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

from yeto.schemas.codecs.base import Codec, Payload, compiled, dot64, fused, pool, spread
from yeto.schemas.codecs.q4 import KEPT_GROUP, decode_piece
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


_MODE = {"at_merge": True, "kept": True}


def gram_at_merge(on: bool) -> None:
    """Whether a dense push's products with b and the round's other pushes wait for the merge's one pass over all the
    rows (the default; `at_merge()`), or are folded as it is decoded, reading every earlier row again (k + 2 rows for
    push k, as before 2026-12-05). The two give the same bits (benchmarks/round.py --gram compares them in one run)."""
    _MODE["at_merge"] = bool(on)


def at_merge() -> bool:
    """Whether dense pushes' cross products are left to the merge: on the CPU, with the fused kernels, unless switched
    off (`gram_at_merge`). On the GPU a push's row is folded as it arrives (its pass is one gemv on the device)."""
    return _MODE["at_merge"] and not GPU and fused()


def keep_encoded(on: bool) -> None:
    """Whether a dense push whose codec can (q4: `keep`, `decode_piece`) keeps its encoded bytes when its products wait
    for the merge (`at_merge()`): its squared norm taken from the bytes with no f32 row written, its pieces decoded
    inside the merge's Gram pass and outer step (0.5 B a value read per push instead of 4). The same bits either way
    (benchmarks/round.py --gram at-merge,kept compares them in one run)."""
    _MODE["kept"] = bool(on)


def kept(codec: Codec) -> bool:
    """Whether a dense push of `codec` is kept encoded until the merge (`keep_encoded`, `at_merge()`)."""
    return _MODE["kept"] and at_merge() and getattr(codec, "kept_norm_pieces", None) is not None


def kept_norm(codec: Codec, kept_bytes: np.ndarray, numel: int) -> float:
    """The squared norm of the decode of `kept_bytes` (`codec.keep`): the bits `decode_with_norm` gives (the same
    pieces, dot64 and order of sums), with no row written."""
    products = np.zeros(1)
    _add_in_order(codec.kept_norm_pieces(kept_bytes, numel, PIECE), products)   # type: ignore[attr-defined]
    return float(products[0])


NORM_PIECE = 1 << 22              # values per piece of `sq_norm`: a piece's f32 dot product, the pieces' sums in order


def sq_norm(row) -> float:
    """<row, row>: NumPy's f32 dot product (BLAS, the GIL released) of each NORM_PIECE values, on the kernel threads
    (codecs/base.py `spread`), the pieces' sums added in order in float64: the same value whatever the thread count.
    Θ's norm for admission's bound on the host (fragment.py `ThetaNorm`: taken after the broadcast, off the next
    round's first push), where NumPy's norm of the whole row ran on one thread."""
    pieces = spread(lambda lo: float(np.dot(row[lo:lo + NORM_PIECE], row[lo:lo + NORM_PIECE])), range(0, row.size, NORM_PIECE))
    return sum(pieces, 0.0)                  # in order: float64 adds of the pieces' sums


def decode_with_norm(codec: Codec, payload: Payload, numel: int, row) -> float:
    """Decode `payload` into `row` and return its squared norm, float64 from the f32 products of 16K-value pieces
    added in order: the bits of the last entry of its Gram row (`RowProducts`), with none of the other rows read."""
    acc = RowProducts(row.reshape(1, -1), row)
    acc.decode(codec, payload, numel)
    return float(acc.products[0])


class RoundGram:
    """G of one round's pushes, by slot, grown one row per admitted push (a superseding push replaces its slot's),
    and each push's product with the momentum b, <d_m, b> (b does not change while a round is open). A push admitted
    with its squared norm alone (`admit_later`) has its products with b and the others taken in the merge's one
    pass over the rows (`take`), which reads each row once where folding push k as it came read k + 2 rows."""

    def __init__(self) -> None:
        self.g, self.bd = np.zeros((0, 0)), np.zeros(0)
        self.later: set[int] = set()           # slots whose products with b and the other slots are not taken yet

    def admit(self, slot: int, products: np.ndarray, momentum_product: float = 0.0) -> None:
        """`products` = gram_row over rows 0..k of the push buffer for a push decoded into row k; it lands in `slot`."""
        k = products.size - 1
        self._grow(slot)
        others = [j for j in range(k) if j != slot]
        self.g[slot, others] = self.g[others, slot] = products[others]
        self.g[slot, slot] = products[k]
        self.bd[slot] = momentum_product
        self.later.discard(slot)

    def admit_later(self, slot: int, sq_norm: float) -> None:
        """A push in `slot` whose squared norm alone is known: its other products come from `take`'s pass."""
        self._grow(slot)
        self.g[slot, slot] = sq_norm
        self.later.add(slot)

    def take(self, num: int, rows=None, kept: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The matrix of slots 0..num-1 and their products with b, for the merge; the round's Gram starts over.
        `rows`: the fragment's rows (Θ, b, the pushes by slot, dense), read once when a slot was admitted later;
        `kept`: (slot_of, bytes) for pushes kept encoded (rows.py `FragmentRows.kept_of`), decoded in the pass."""
        g, bd = self.g[:num, :num].copy(), self.bd[:num].copy()
        later = sorted(s for s in self.later if s < num)
        if later:
            need = np.zeros((num + 1, num + 1), dtype=np.bool_)   # pairs (i > j) of [b, d_0, ...] to take
            for s in later:
                need[1 + s, :1 + s] = True
                need[2 + s:, 1 + s] = True
            full = gram_pass(rows[1:2 + num], need, kept)
            for s in later:
                bd[s] = full[1 + s, 0]
                others = [j for j in range(num) if j != s]
                g[s, others] = g[others, s] = full[1 + s, 1:][others]
        self.g, self.bd, self.later = np.zeros((0, 0)), np.zeros(0), set()
        return g, bd

    def _grow(self, slot: int) -> None:
        size = max(slot + 1, self.g.shape[0])
        if size > self.g.shape[0]:
            grown = np.zeros((size, size))
            grown[:self.g.shape[0], :self.g.shape[0]] = self.g
            self.g, self.bd = grown, np.concatenate([self.bd, np.zeros(size - self.bd.size)])


def gram_pass(rows, need: np.ndarray, kept: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """out[i, j] = out[j, i] = <rows[i], rows[j]> for each i > j with need[i, j] (0 elsewhere), in one pass: each 16K-value piece
    of every row read once from memory and multiplied with the others while in cache, pieces in parallel, in bands
    like `fold_row`. Each product is the bits `fold_row` gives for the same two rows (the same pieces, the same dot64,
    the pieces' sums added in order). `kept` = (slot_of, bytes): row i with slot_of[i] >= 0 is not read but decoded
    piece by piece from bytes[slot_of[i]] (q4's `keep`: the same values, so the same bits)."""
    num, n = rows.shape
    out = np.zeros((num, num))
    pairs = np.array([(i, j) for i in range(num) for j in range(i) if need[i, j]], dtype=np.int64).reshape(-1, 2)
    if not pairs.size:
        return out
    sums = np.zeros(len(pairs))
    for lo in range(0, n, BAND):
        hi = min(lo + BAND, n)
        partials = np.empty((-(-(hi - lo) // PIECE), len(pairs)))
        with pool():
            if kept is None:
                _piece_pairs(rows, rows, pairs[:, ::-1].copy(), lo, hi, partials)   # (earlier, later), as a fold has them
            else:
                _kept_piece_pairs(rows, kept[0], kept[1], n, pairs[:, ::-1].copy(), lo, hi, partials)
        _add_in_order(partials, sums)
    out[pairs[:, 0], pairs[:, 1]] = out[pairs[:, 1], pairs[:, 0]] = sums
    return out


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
            _piece_pairs(rows, row.reshape(1, -1), _against_one(rows.shape[0]), lo, hi, partials)
        _add_in_order(partials, products)


def _against_one(num: int) -> np.ndarray:
    """The pairs (r, 0) for r < num: every row of one array against the one row of another."""
    pairs = np.zeros((num, 2), dtype=np.int64)
    pairs[:, 0] = np.arange(num)
    return pairs


@numba.njit(nogil=True, cache=True, parallel=True)
def _piece_pairs(a, b, pairs, start, stop, partials):  # pragma: no cover - compiled
    """partials[p, q] = <a[pairs[q, 0]], b[pairs[q, 1]]> over piece p of start..stop-1, pieces in parallel: each piece
    of a row is read from memory once and multiplied with the others while in cache."""
    for p in numba.prange(partials.shape[0]):
        lo = start + p * PIECE
        hi = min(lo + PIECE, stop)
        for q in range(pairs.shape[0]):
            partials[p, q] = dot64(a[pairs[q, 0], lo:hi], b[pairs[q, 1], lo:hi])


@numba.njit(nogil=True, cache=True, parallel=True)
def _kept_piece_pairs(rows, slot_of, kept, numel, pairs, start, stop, partials):  # pragma: no cover - compiled
    """`_piece_pairs(rows, rows, ...)` where a row i with slot_of[i] >= 0 is decoded from kept[slot_of[i]] piece by
    piece into a scratch row in cache instead of read (q4 `decode_piece`), groups of pieces in parallel."""
    for g in numba.prange(-(-partials.shape[0] // KEPT_GROUP)):
        scratch = np.empty((rows.shape[0], PIECE), dtype=np.float32)
        for p in range(g * KEPT_GROUP, min((g + 1) * KEPT_GROUP, partials.shape[0])):
            lo = start + p * PIECE
            hi = min(lo + PIECE, stop)
            for r in range(rows.shape[0]):
                if slot_of[r] >= 0:
                    decode_piece(kept[slot_of[r]], numel, lo, hi, scratch[r])
            for q in range(pairs.shape[0]):
                partials[p, q] = dot64(_source(rows, scratch, slot_of, pairs[q, 0], lo, hi),
                                       _source(rows, scratch, slot_of, pairs[q, 1], lo, hi))


@numba.njit(nogil=True, cache=True, inline="always")
def _source(rows, scratch, slot_of, r, lo, hi):  # pragma: no cover - compiled
    """Values lo..hi-1 of row r: its scratch row when it is kept encoded (decoded there for this piece), else itself."""
    if slot_of[r] >= 0:
        return scratch[r, :hi - lo]
    return rows[r, lo:hi]


@numba.njit(nogil=True, cache=True)
def _add_in_order(partials, products):  # pragma: no cover - compiled
    for p in range(partials.shape[0]):
        for r in range(partials.shape[1]):
            products[r] += partials[p, r]
