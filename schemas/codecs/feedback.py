"""Sender-side error feedback: what encoding a payload lost is added to the sender's next payload of that key."""
from __future__ import annotations

import numpy as np

from yeto.schemas.codecs.base import Codec


class ErrorFeedback:
    """Per key (a fragment): encode d + decay * e, keep e <- (d + decay * e) - Q(d + decay * e). Works with any codec;
    a sender uses it where the codec's `error_feedback` asks for it. `decay` 1 (the default) loses nothing: the sum of
    what was sent plus e is the sum of the d's. Below 1 it is SparseLoCo's leaky accumulator (e fades by `decay` a push)."""

    def __init__(self, codec: Codec, decay: float = 1.0) -> None:
        assert 0.0 < decay <= 1.0
        self.codec, self.decay = codec, decay
        self.residuals: dict[object, np.ndarray] = {}

    def encode(self, key: object, d: np.ndarray) -> bytes:
        d = np.asarray(d, dtype=np.float32).reshape(-1)
        residual = self.residuals.get(key)
        if residual is None or residual.size != d.size:
            residual = self.residuals[key] = np.zeros(d.size, dtype=np.float32)
        if self.decay != 1.0:
            residual *= np.float32(self.decay)
        residual += d                                        # residual now holds d + decay * e
        payload = self.codec.encode(residual)
        residual -= self.codec.decode(payload, d.size)       # e <- (d + e) - Q(d + e)
        return payload

    def reset(self, key: object) -> None:
        self.residuals.pop(key, None)
