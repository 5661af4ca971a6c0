"""The broadcast shadow: each new global version goes out as a delta against what learners already hold.

Every version v >= 1 is published as a delta Q(theta_v - shadow_{v-1}) and the shadow advances by
exactly what learners decode, shadow_v = shadow_{v-1} + decode(delta), so every learner's copy stays
bit-identical to this one and quantization error never accumulates (the next delta carries it). Version 0
and every `keyframe_every` versions also go out as an f32 keyframe of the shadow, for (re)joining learners.
"""
from __future__ import annotations

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, apply_global, sha256


class BroadcastShadow:
    """The syncer's copy of what learners hold, per fragment, and the messages that keep them in step."""

    def __init__(self, *, run_id: str, fingerprint: str, keyframe_every: int, codec_down: str) -> None:
        self.run_id, self.fingerprint = run_id, fingerprint
        self.keyframe_every, self.codec_down = keyframe_every, codec_down
        self.shadows: dict[int, np.ndarray] = {}
        self.versions: dict[int, int] = {}

    def publish(self, fragment: int, version: int, theta: np.ndarray, role: str = "layers") -> list[tuple[FragmentHeader, bytes]]:
        """Messages announcing `version` of the fragment whose f32 values are `theta` (host array)."""
        out = []
        if fragment not in self.shadows:
            self.shadows[fragment] = np.array(theta, dtype=np.float32, copy=True)
        else:
            shadow = self.shadows[fragment]
            payload = codecs.encode(self.codec_down, theta - shadow)
            header = self._header(fragment, version, "delta", self.codec_down, payload, role)
            self.shadows[fragment] = apply_global(shadow, header, payload)
            out.append((header, payload))
        self.versions[fragment] = version
        if version % self.keyframe_every == 0 or not out:
            out.append(self.keyframe(fragment, role))
        return out

    def keyframe(self, fragment: int, role: str = "layers") -> tuple[FragmentHeader, bytes]:
        """An f32 keyframe of the current shadow: a joining learner ends up bit-identical to the others."""
        payload = codecs.encode("f32", self.shadows[fragment])
        return self._header(fragment, self.versions[fragment], "keyframe", "f32", payload, role), payload

    def restore(self, fragment: int, version: int, shadow: np.ndarray) -> None:
        self.shadows[fragment], self.versions[fragment] = np.array(shadow, dtype=np.float32, copy=True), version

    def _header(self, fragment: int, version: int, kind: str, codec: str, payload: bytes, role: str) -> FragmentHeader:
        numel = self.shadows[fragment].size
        return FragmentHeader(run_id=self.run_id, fragment=fragment, kind=kind, role=role, version=version,
                              base_version=max(version - 1, 0), fingerprint=self.fingerprint, codec=codec,
                              numel=numel, sha256=sha256(payload))
