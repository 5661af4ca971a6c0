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

import numpy as np

from yeto.schemas.codecs.base import OnChunk, Payload, check_size, decode_whole

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
