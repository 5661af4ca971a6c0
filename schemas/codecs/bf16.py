"""bf16: the top 16 bits of each f32, rounded to nearest even (as torch rounds), little-endian, 2 bytes each."""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from yeto.schemas.codecs.base import OnChunk, Payload, check_size, decode_whole


class BF16Codec:
    name = "bf16"
    error_feedback = False         # round-to-nearest errors are unbiased and 2^-9 of each value: none carried

    def encoded_size(self, numel: int) -> int:
        return 2 * numel

    def encode(self, x: np.ndarray) -> bytes:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        bits = x.view(np.uint32)
        rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype("<u2")
        nan = np.isnan(x)
        if nan.any():              # rounding could carry a NaN's payload into the exponent
            rounded[nan] = 0x7FC0
        return rounded.tobytes()

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        return decode_whole(self, payload, numel, out, on_chunk)

    def decode_on(self, xp: ModuleType, raw: Any, numel: int, out: Any) -> None:
        check_size(self, raw, numel)
        wide = raw.view(xp.uint16)[:numel].astype(xp.uint32)
        wide <<= 16
        out[:] = wide.view(xp.float32)
