"""topk2, topk4, topk8: chunk-wise top-k of the values with 2-bit codes and 6-bit offsets, sent with error feedback.

The values are cut into chunks of 64 (the last zero-padded); each chunk keeps its k values of largest |x| (k = 2:
3.1% of the values, k = 4: 6.25%, k = 8: 12.5%). A chunk is one bf16 scale s (its absmax, rounded to nearest even) and k entry
bytes `offset | sign << 7 | high << 6`: offset in 0..63 within the chunk, magnitude s (high) or LOW * s. So a
payload is all scales first (2 bytes per chunk), then all entries (k bytes per chunk): (2 + k) / 64 bytes per value,
0.0625 for topk2 (1/64 of f32), 0.09375 for topk4, 0.15625 for topk8. The size depends on numel alone, so the syncer
checks it before allocating. Entries are canonical: the nonzero ones by offset, then, where a chunk has fewer than k nonzero
values, repeats of its first entry (so an exact 0 is never sent as a value, and equal values encode to equal bytes).
Decoding writes the k entries one after another (a repeated offset: the last wins), every other value is 0: the
same bits on every machine, NumPy or CuPy. With error feedback (learners: schemas/codecs/feedback.py; the
broadcast: its shadow, services/syncer/broadcast.py) what a payload leaves out is carried into the next one
(docs/SYNC_MATH.md, "Sparse pushes and broadcasts").
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numba
import numpy as np

from yeto.schemas.codecs.base import OnChunk, Payload, check_size, decode_whole, pool

CHUNK = 64
LOW = 0.6                          # the lower magnitude over the scale: least squared error on synthetic chunks
LUT = np.array([LOW, 1.0, -LOW, -1.0], dtype=np.float32)     # by code = sign << 1 | high
_ROWS_PER_PASS = 16384             # 1M values at a time, so temporaries stay in cache


class SparseCodec:
    """Top-k of each chunk of 64 values, k fixed by the codec (its protocol id names it: `topk<k>`)."""

    error_feedback = True          # what a payload leaves out (~97% of the values) must reach a later one

    def __init__(self, k: int) -> None:
        assert 1 <= k <= CHUNK
        self.k = k
        self.name = f"topk{k}"

    def encoded_size(self, numel: int) -> int:
        return -(-numel // CHUNK) * (2 + self.k)

    def encode(self, x: np.ndarray) -> bytes:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        numel, k = x.size, self.k
        chunks = -(-numel // CHUNK)
        scales = np.empty(chunks, dtype="<u2")
        entries = np.empty((chunks, k), dtype=np.uint8)
        for start in range(0, chunks, _ROWS_PER_PASS):
            stop = min(start + _ROWS_PER_PASS, chunks)
            rows = np.zeros((stop - start, CHUNK), dtype=np.float32)
            rows.reshape(-1)[:min(numel, stop * CHUNK) - start * CHUNK] = x[start * CHUNK:stop * CHUNK]
            scales[start:stop], entries[start:stop] = _encode_rows(rows, k)
        return scales.tobytes() + entries.tobytes()

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        return decode_whole(self, payload, numel, out, on_chunk)

    def decode_entries(self, payload: Payload, numel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indices, values, chunk starts) of the decoded push without a dense row (the syncer's sparse merge,
        services/syncer/sparse.py)."""
        return decode_entries(self, payload, numel)

    def decode_on(self, xp: ModuleType, raw: Any, numel: int, out: Any) -> None:
        check_size(self, raw, numel)
        chunks = -(-numel // CHUNK)
        wide = raw[:2 * chunks].view(xp.uint16).astype(xp.uint32)
        wide <<= 16
        scales = wide.view(xp.float32)
        entries = raw[2 * chunks:].reshape(chunks, self.k)
        values = xp.asarray(LUT)[entries >> 6] * scales[:, None]
        full = numel // CHUNK
        rows = out[:full * CHUNK].reshape(full, CHUNK) if full == chunks else xp.empty((chunks, CHUNK), dtype=xp.float32)
        rows[:] = 0
        at = xp.arange(chunks)
        for j in range(self.k):                       # one entry per chunk at a time: no two writes collide
            rows[at, entries[:, j] & (CHUNK - 1)] = values[:, j]
        if full < chunks:
            out[:] = rows.reshape(-1)[:numel]


def _encode_rows(rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """bf16 scales and entry bytes of chunks `rows` (n, 64)."""
    mag = np.abs(rows)
    scale = mag.max(axis=1)                          # NaN stays NaN: the receiver decodes NaN and refuses the push
    bits = scale.view(np.uint32)
    half = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype("<u2")
    half[np.isnan(scale)] = 0x7FC0
    s = (half.astype(np.uint32) << 16).view(np.float32)
    offsets = np.argpartition(mag, CHUNK - k, axis=1)[:, CHUNK - k:]
    kept = np.take_along_axis(rows, offsets, axis=1)
    empty = kept == 0                                # fewer than k nonzero values: repeats of the first entry
    order = np.argsort(offsets + CHUNK * empty, axis=1)          # canonical: nonzero ones by offset, then the repeats
    offsets, kept, empty = (np.take_along_axis(a, order, axis=1) for a in (offsets, kept, empty))
    with np.errstate(invalid="ignore", divide="ignore"):
        high = np.abs(kept) >= np.float32((1 + LOW) / 2) * s[:, None]
    codes = ((kept < 0).astype(np.uint8) << 1) | high
    entries = offsets.astype(np.uint8) | (codes << 6)
    return half, np.where(empty, entries[:, :1], entries)


def decode_entries(codec: SparseCodec, payload: Payload, numel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The payload as (indices, values, chunk starts) without a dense row: indices int64 ascending and unique, values
    f32, the same bits `decode` writes there (a repeated offset: the last entry wins; offsets in the padding past
    `numel` are dropped; every other value of `decode` is 0); chunk c's entries are starts[c]..starts[c+1]-1.
    ValueError on a payload of the wrong size."""
    check_size(codec, payload, numel)
    raw = np.frombuffer(payload, dtype=np.uint8)
    chunks = -(-numel // CHUNK)
    scales = (raw[:2 * chunks].view("<u2").astype(np.uint32) << 16).view(np.float32)
    entries = raw[2 * chunks:].reshape(chunks, codec.k)
    counts = np.empty(chunks + 1, dtype=np.int64)
    counts[0] = 0
    with pool():
        _count_kept(entries, numel, counts[1:])
    np.cumsum(counts, out=counts)
    idx, vals = np.empty(int(counts[-1]), dtype=np.int64), np.empty(int(counts[-1]), dtype=np.float32)
    with pool():
        _fill_kept(entries, scales, LUT, numel, counts, idx, vals)
    return idx, vals, counts


@numba.njit(nogil=True, cache=True, inline="always")
def _kept(entries: Any, c: int, j: int, numel: int) -> bool:  # pragma: no cover - compiled
    """Whether entry j of chunk c is written last at its offset and lies inside the `numel` values."""
    off = entries[c, j] & (CHUNK - 1)
    if c * CHUNK + off >= numel:
        return False
    for later in range(j + 1, entries.shape[1]):
        if entries[c, later] & (CHUNK - 1) == off:
            return False
    return True


@numba.njit(nogil=True, cache=True, parallel=True)
def _count_kept(entries: Any, numel: int, counts: Any) -> None:  # pragma: no cover - compiled
    for c in numba.prange(entries.shape[0]):
        n = 0
        for j in range(entries.shape[1]):
            n += _kept(entries, c, j, numel)
        counts[c] = n


@numba.njit(nogil=True, cache=True, parallel=True)
def _fill_kept(entries: Any, scales: Any, lut: Any, numel: int,
               starts: Any, idx: Any, vals: Any) -> None:  # pragma: no cover - compiled
    for c in numba.prange(entries.shape[0]):
        at = starts[c]
        for j in range(entries.shape[1]):
            if _kept(entries, c, j, numel):
                i, v = c * CHUNK + (entries[c, j] & (CHUNK - 1)), lut[entries[c, j] >> 6] * scales[c]
                pos = at                                  # insertion by index: a chunk's kept entries end ascending
                while pos > starts[c] and idx[pos - 1] > i:
                    idx[pos], vals[pos] = idx[pos - 1], vals[pos - 1]
                    pos -= 1
                idx[pos], vals[pos] = i, v
                at += 1
