"""The broadcast shadow: each new global version goes out as a delta against what learners already hold.

Every version v >= 1 is published as a delta Q(theta_v - shadow_{v-1}) and the shadow advances by
exactly what learners decode, shadow_v = shadow_{v-1} + decode(delta), so every learner's copy stays
bit-identical to this one and quantization error never accumulates (the next delta carries it). Version 0
and every `keyframe_every` versions also go out as an f32 keyframe of the shadow, for (re)joining learners.
"""
from __future__ import annotations

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.buffers import BufferPool
from yeto.schemas.codecs.base import Payload, encode_delta
from yeto.schemas.fragments import CHUNK_DIGESTED, FragmentHeader, sha256

KEYFRAME_PAYLOADS = BufferPool()
"""Where f32 keyframes are written, one pool per process (schemas/buffers.py): every `keyframe_every` versions a keyframe
as large as Θ went into fresh bytes whose pages fault in; it is dropped once its chunks are out, so one buffer serves."""


class Shadow:
    """The syncer's copy of what learners hold of one fragment, and the messages that keep them in step."""

    def __init__(self, *, run_id: str, fragment: int, fingerprint: str, role: str, keyframe_every: int, codec_down: str) -> None:
        self.run_id, self.fragment, self.fingerprint, self.role = run_id, fragment, fingerprint, role
        self.keyframe_every, self.codec_down = keyframe_every, codec_down
        self.values: np.ndarray | None = None         # None until version 0 is published (or restored)
        self.version = 0
        self.keyframed: int | None = None             # the version of the newest keyframe sent

    def publish(self, version: int, theta: np.ndarray) -> list[tuple[FragmentHeader, Payload]]:
        """Messages announcing `version` of the fragment whose f32 values are `theta` (host array)."""
        out = []
        if self.values is None:
            self.values = np.array(theta, dtype=np.float32, copy=True)
        else:
            # encode theta - shadow and advance the shadow by what learners decode (apply_global), in one pass
            payload = encode_delta(codecs.codec(self.codec_down), theta, self.values)
            out.append((self._header(version, "delta", self.codec_down, payload), payload))
        self.version = version
        if version % self.keyframe_every == 0 or not out:
            out.append(self.keyframe())
        return out

    def keyframe(self) -> tuple[FragmentHeader, Payload]:
        """An f32 keyframe of the current shadow: a joining learner ends up bit-identical to the others. The bytes of
        `codecs.F32.encode`, in a buffer of KEYFRAME_PAYLOADS (a read-only memoryview that holds it until dropped)."""
        out = KEYFRAME_PAYLOADS.take(codecs.F32.encoded_size(self.values.size))
        np.copyto(out.view("<f4"), self.values)
        payload = out.data.toreadonly()
        self.keyframed = self.version
        return self._header(self.version, "keyframe", codecs.F32.name, payload), payload

    def reset(self, version: int, values: np.ndarray) -> None:
        """Hold `values` as `version` (a restored snapshot, or Θ itself for the final cut's exact keyframes)."""
        self.values, self.version = np.array(values, dtype=np.float32, copy=True), version

    def _header(self, version: int, kind: str, codec: str, payload: Payload) -> FragmentHeader:
        """A keyframe's header names its payload by its SHA-256; a delta's digest is made from its chunks' when they
        are (schemas/fragments.py CHUNK_DIGESTED: services/syncer/outputs.py broadcast_chunks), so it is not hashed here."""
        return FragmentHeader(run_id=self.run_id, fragment=self.fragment, kind=kind, role=self.role, version=version,
                              base_version=max(version - 1, 0), fingerprint=self.fingerprint, codec=codec,
                              numel=self.values.size, sha256="" if kind in CHUNK_DIGESTED else sha256(payload))


class BroadcastShadow:
    """One Shadow per fragment of a run, made on first use: a syncer's broadcast as tests of learners drive it."""

    def __init__(self, *, run_id: str, fingerprint: str, keyframe_every: int, codec_down: str) -> None:
        self.run_id, self.fingerprint, self.keyframe_every, self.codec_down = run_id, fingerprint, keyframe_every, codec_down
        self.fragments: dict[int, Shadow] = {}

    @property
    def shadows(self) -> dict[int, np.ndarray]:
        return {p: s.values for p, s in self.fragments.items()}

    def publish(self, fragment: int, version: int, theta: np.ndarray, role: str = "layers") -> list[tuple[FragmentHeader, bytes]]:
        if fragment not in self.fragments:
            self.fragments[fragment] = Shadow(run_id=self.run_id, fragment=fragment, fingerprint=self.fingerprint, role=role,
                                              keyframe_every=self.keyframe_every, codec_down=self.codec_down)
        return self.fragments[fragment].publish(version, theta)

    def keyframe(self, fragment: int, role: str = "layers") -> tuple[FragmentHeader, bytes]:
        return self.fragments[fragment].keyframe()
