"""q4: 4 bits a value in blocks of 256, the default for pushes and broadcast deltas, sent with error feedback.

A block is one little-endian f32 scale (the block's absmax), then 4-bit codes (bit 3 = sign, bits 0-2 =
magnitude index on the uniform grid {0, 1/7, ..., 1} x scale), two codes per byte, low nibble first. 132 bytes
per block = 4.125 bits per value. The uniform grid was chosen by measurement (benchmarks/wire.py prints the
error of the uniform and power-of-two grids). Decoding is a table lookup and one f32 multiply, so every machine
decodes the same bytes to the same bits.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from yeto.schemas.codecs.base import OnChunk, Payload, check_size

BLOCK = 256
LEVELS = 7                         # magnitudes 0..7 on the uniform grid
LUT = np.array([i / LEVELS for i in range(8)] + [-i / LEVELS for i in range(8)], dtype=np.float32)
_BLOCK_BYTES = 4 + BLOCK // 2
_ROWS_PER_PASS = 4096              # 1M values at a time, so temporaries stay in cache


class Q4Codec:
    name = "q4"
    error_feedback = True          # a block's small values round to zero: without feedback they are never sent

    def encoded_size(self, numel: int) -> int:
        return -(-numel // BLOCK) * _BLOCK_BYTES

    def encode(self, x: np.ndarray) -> bytes:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        numel = x.size
        num_blocks = -(-numel // BLOCK)
        scales = np.empty(num_blocks, dtype="<f4")
        codes = np.empty((num_blocks, BLOCK // 2), dtype=np.uint8)
        full = numel // BLOCK
        for start in range(0, num_blocks, _ROWS_PER_PASS):
            stop = min(start + _ROWS_PER_PASS, num_blocks)
            if stop <= full:
                rows = x[start * BLOCK:stop * BLOCK].reshape(-1, BLOCK)
            else:                  # the last, partial block is zero-padded
                rows = np.zeros((stop - start, BLOCK), dtype=np.float32)
                rows.reshape(-1)[:numel - start * BLOCK] = x[start * BLOCK:]
            mag = np.abs(rows)
            scale = mag.max(axis=1)
            scales[start:stop] = scale
            # divide rather than multiply by 7/scale: that overflows for subnormal scales. A NaN keeps its
            # block's scale NaN, so the receiver decodes NaN and refuses the push instead of garbage.
            with np.errstate(invalid="ignore", divide="ignore"):
                np.divide(mag, scale[:, None], out=mag, where=scale[:, None] > 0)
                mag *= np.float32(LEVELS)
                q = np.rint(mag, out=mag).astype(np.uint8)
            q |= ((rows < 0) & (q > 0)).view(np.uint8) << 3       # no negative zero: one code per value
            codes[start:stop] = q[:, 0::2] | (q[:, 1::2] << 4)
        return scales.tobytes() + codes.tobytes()

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        check_size(self, payload, numel)
        out = np.empty(numel, dtype=np.float32) if out is None else out
        num_blocks = -(-numel // BLOCK)
        scales = np.frombuffer(payload, dtype="<f4", count=num_blocks)
        codes = np.frombuffer(payload, dtype=np.uint8, offset=4 * num_blocks).reshape(num_blocks, BLOCK // 2)
        full = numel // BLOCK
        per_pass = _ROWS_PER_PASS if on_chunk is None else _ROWS_PER_PASS // 4    # 1 MiB of output: the caller's reads hit L2
        for start in range(0, num_blocks, per_pass):
            stop = min(start + per_pass, num_blocks)
            packed = codes[start:stop]
            rows = np.empty((stop - start, BLOCK), dtype=np.float32)
            np.take(LUT, packed & 15, out=rows[:, 0::2])
            np.take(LUT, packed >> 4, out=rows[:, 1::2])
            rows *= scales[start:stop, None]
            if stop <= full:
                out[start * BLOCK:stop * BLOCK] = rows.reshape(-1)
            else:
                out[start * BLOCK:] = rows.reshape(-1)[:numel - start * BLOCK]
            if on_chunk is not None:
                on_chunk(start * BLOCK, min(stop * BLOCK, numel))
        return out

    def decode_on(self, xp: ModuleType, raw: Any, numel: int, out: Any) -> None:
        check_size(self, raw, numel)
        blocks = -(-numel // BLOCK)
        scales = raw[:4 * blocks].view(xp.float32)
        packed = raw[4 * blocks:].reshape(blocks, BLOCK // 2)
        lut = xp.asarray(LUT)
        full = numel // BLOCK
        rows = out[:full * BLOCK].reshape(full, BLOCK)
        if full < blocks:                     # a partial last block: decode it whole, keep its head
            rows = xp.empty((blocks, BLOCK), dtype=xp.float32)
        rows[:, 0::2] = lut[packed & 15]
        rows[:, 1::2] = lut[packed >> 4]
        rows *= scales[:, None]
        if full < blocks:
            out[:] = rows.reshape(-1)[:numel]
