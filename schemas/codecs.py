"""Wire codecs for fragment payloads: f32, bf16 (round-to-nearest-even) and q4, plus sender error feedback.

q4: blocks of 256 values, one little-endian f32 scale (the block's absmax) per block, then 4-bit codes
(bit 3 = sign, bits 0-2 = magnitude index on the uniform grid {0, 1/7, ..., 1} x scale), two codes per
byte, low nibble first. 132 bytes per block = 4.125 bits per value. The uniform grid was chosen by
measurement (benchmarks/wire.py prints the error of the uniform and power-of-two grids). Decoding is a
table lookup and one f32 multiply, so every machine decodes the same bytes to the same bits.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

CODECS = ("f32", "bf16", "q4")
Q4_BLOCK = 256
Q4_LEVELS = 7                      # magnitudes 0..7 on the uniform grid
_Q4_BLOCK_BYTES = 4 + Q4_BLOCK // 2
_ROWS_PER_PASS = 4096              # q4 works on 1M values at a time so temporaries stay in cache
Q4_LUT = np.array([i / Q4_LEVELS for i in range(8)] + [-i / Q4_LEVELS for i in range(8)], dtype=np.float32)


def encoded_size(codec: str, numel: int) -> int:
    """Bytes of the encoded payload of `numel` values; ValueError on an unknown codec."""
    if codec == "f32":
        return 4 * numel
    if codec == "bf16":
        return 2 * numel
    if codec == "q4":
        return -(-numel // Q4_BLOCK) * _Q4_BLOCK_BYTES
    raise ValueError(f"unknown codec {codec!r}; use one of {', '.join(CODECS)}")


def check_size(codec: str, payload: bytes | bytearray | memoryview, numel: int) -> None:
    """ValueError unless `payload` is exactly the encoded size of `numel` values of `codec`."""
    if len(payload) != encoded_size(codec, numel):
        raise ValueError(f"{codec} payload of {numel} values must be {encoded_size(codec, numel)} bytes, got {len(payload)}")


def encode(codec: str, x: np.ndarray) -> bytes:
    """Encode a 1-D float array (any float dtype, cast to f32) to the wire bytes of `codec`."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if codec == "f32":
        return x.astype("<f4", copy=False).tobytes()
    if codec == "bf16":
        return _bf16_bits(x).tobytes()
    if codec == "q4":
        return _q4_encode(x)
    raise ValueError(f"unknown codec {codec!r}; use one of {', '.join(CODECS)}")


def decode(codec: str, payload: bytes | bytearray | memoryview, numel: int, out: np.ndarray | None = None, *,
           on_chunk: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Decode wire bytes to a 1-D f32 array of `numel` values (into `out` when given). `on_chunk(start, stop)`
    is called as each stretch of `out` is written (q4: 256K values at a time), while it is still in cache."""
    check_size(codec, payload, numel)
    out = np.empty(numel, dtype=np.float32) if out is None else out
    if codec == "f32":
        out[:] = np.frombuffer(payload, dtype="<f4", count=numel)
    elif codec == "bf16":
        wide = np.frombuffer(payload, dtype="<u2", count=numel).astype(np.uint32)
        wide <<= 16
        out[:] = wide.view(np.float32)
    else:
        _q4_decode(payload, numel, out, on_chunk)
        return out
    if on_chunk is not None:
        on_chunk(0, numel)
    return out


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    bits = x.view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype("<u2")
    nan = np.isnan(x)
    if nan.any():                  # rounding could carry a NaN's payload into the exponent
        rounded[nan] = 0x7FC0
    return rounded


def _q4_encode(x: np.ndarray) -> bytes:
    numel = x.size
    num_blocks = -(-numel // Q4_BLOCK)
    scales = np.empty(num_blocks, dtype="<f4")
    codes = np.empty((num_blocks, Q4_BLOCK // 2), dtype=np.uint8)
    full = numel // Q4_BLOCK
    for start in range(0, num_blocks, _ROWS_PER_PASS):
        stop = min(start + _ROWS_PER_PASS, num_blocks)
        if stop <= full:
            rows = x[start * Q4_BLOCK:stop * Q4_BLOCK].reshape(-1, Q4_BLOCK)
        else:                      # the last, partial block is zero-padded
            rows = np.zeros((stop - start, Q4_BLOCK), dtype=np.float32)
            rows.reshape(-1)[:numel - start * Q4_BLOCK] = x[start * Q4_BLOCK:]
        mag = np.abs(rows)
        scale = mag.max(axis=1)
        scales[start:stop] = scale
        # divide rather than multiply by 7/scale: that overflows for subnormal scales. A NaN keeps its
        # block's scale NaN, so the receiver decodes NaN and refuses the push instead of garbage.
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide(mag, scale[:, None], out=mag, where=scale[:, None] > 0)
            mag *= np.float32(Q4_LEVELS)
            q = np.rint(mag, out=mag).astype(np.uint8)
        q |= ((rows < 0) & (q > 0)).view(np.uint8) << 3       # no negative zero: one code per value
        codes[start:stop] = q[:, 0::2] | (q[:, 1::2] << 4)
    return scales.tobytes() + codes.tobytes()


def _q4_decode(payload: bytes | bytearray | memoryview, numel: int, out: np.ndarray,
               on_chunk: Callable[[int, int], None] | None = None) -> None:
    num_blocks = -(-numel // Q4_BLOCK)
    scales = np.frombuffer(payload, dtype="<f4", count=num_blocks)
    codes = np.frombuffer(payload, dtype=np.uint8, offset=4 * num_blocks).reshape(num_blocks, Q4_BLOCK // 2)
    full = numel // Q4_BLOCK
    per_pass = _ROWS_PER_PASS if on_chunk is None else _ROWS_PER_PASS // 4    # 1 MiB of output: the caller's reads hit L2
    for start in range(0, num_blocks, per_pass):
        stop = min(start + per_pass, num_blocks)
        packed = codes[start:stop]
        rows = np.empty((stop - start, Q4_BLOCK), dtype=np.float32)
        np.take(Q4_LUT, packed & 15, out=rows[:, 0::2])
        np.take(Q4_LUT, packed >> 4, out=rows[:, 1::2])
        rows *= scales[start:stop, None]
        if stop <= full:
            out[start * Q4_BLOCK:stop * Q4_BLOCK] = rows.reshape(-1)
        else:
            out[start * Q4_BLOCK:] = rows.reshape(-1)[:numel - start * Q4_BLOCK]
        if on_chunk is not None:
            on_chunk(start * Q4_BLOCK, min(stop * Q4_BLOCK, numel))


class ErrorFeedback:
    """Sender-side error feedback per key (a fragment): encode d + e, keep e <- (d + e) - Q(d + e)."""

    def __init__(self, codec: str = "q4") -> None:
        encoded_size(codec, 0)
        self.codec = codec
        self.residuals: dict[object, np.ndarray] = {}

    def encode(self, key: object, d: np.ndarray) -> bytes:
        d = np.asarray(d, dtype=np.float32).reshape(-1)
        residual = self.residuals.get(key)
        if residual is None or residual.size != d.size:
            residual = self.residuals[key] = np.zeros(d.size, dtype=np.float32)
        residual += d                                   # residual now holds d + e
        payload = encode(self.codec, residual)
        residual -= decode(self.codec, payload, d.size)  # e <- (d + e) - Q(d + e)
        return payload

    def reset(self, key: object) -> None:
        self.residuals.pop(key, None)
