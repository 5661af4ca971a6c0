"""f32: the values themselves, little-endian, 4 bytes each. Keyframes and a learner's initial values use it."""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from yeto.schemas.codecs.base import OnChunk, Payload, check_size, decode_whole


class F32Codec:
    name = "f32"
    error_feedback = False         # lossless: nothing to carry

    def encoded_size(self, numel: int) -> int:
        return 4 * numel

    def encode(self, x: np.ndarray) -> bytes:
        return np.ascontiguousarray(x, dtype="<f4").reshape(-1).tobytes()

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        return decode_whole(self, payload, numel, out, on_chunk)

    def decode_on(self, xp: ModuleType, raw: Any, numel: int, out: Any) -> None:
        check_size(self, raw, numel)
        out[:] = raw.view(xp.float32)[:numel]
