"""The `Codec` protocol every wire codec implements, and what decodes share: the size check, a whole-array host decode."""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import numpy as np

Payload = bytes | bytearray | memoryview
OnChunk = Callable[[int, int], None]


class Codec(Protocol):
    """One payload encoding of 1-D f32 values. Host and device decodes give the same bits for the same bytes."""

    name: str
    """The protocol id: the `codec` a FragmentHeader and a SyncConfig carry."""
    error_feedback: bool
    """Whether a sender keeps what encoding lost and adds it to its next payload (schemas/codecs/feedback.py)."""

    def encoded_size(self, numel: int) -> int:
        """Bytes of the encoded payload of `numel` values."""
        ...

    def encode(self, x: np.ndarray) -> bytes:
        """The wire bytes of a 1-D f32 array."""
        ...

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        """A 1-D f32 array of `numel` values (written into `out` when given). `on_chunk(start, stop)` is called as
        each stretch of `out` is written, while it is still in cache. ValueError on a payload of the wrong size."""
        ...

    def decode_on(self, xp: ModuleType, raw: Any, numel: int, out: Any) -> None:
        """Decode into `out` on the device of array module `xp` (numpy or cupy), `raw` the payload's uint8 array
        there: only the encoded bytes cross to the device. ValueError on a payload of the wrong size."""
        ...


def check_size(codec: Codec, payload: Any, numel: int) -> None:
    """ValueError unless `payload` (bytes or a 1-D uint8 array) is exactly the encoded size of `numel` values."""
    if len(payload) != codec.encoded_size(numel):
        raise ValueError(f"{codec.name} payload of {numel} values must be {codec.encoded_size(numel)} bytes, "
                         f"got {len(payload)}")


def decode_whole(codec: Codec, payload: Payload, numel: int, out: np.ndarray | None, on_chunk: OnChunk | None) -> np.ndarray:
    """`codec.decode` for a codec whose one vectorized pass over NumPy is its host decode: its `decode_on`."""
    check_size(codec, payload, numel)
    out = np.empty(numel, dtype=np.float32) if out is None else out
    codec.decode_on(np, np.frombuffer(payload, dtype=np.uint8), numel, out)
    if on_chunk is not None:
        on_chunk(0, numel)
    return out
