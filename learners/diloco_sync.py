"""The DiLoCo step boundary every learner backend shares: anchors, alpha-blend, streaming pushes, globals.

    sync = DilocoSync(arrays, config, run_id=..., learner=..., generation=...)
    transport.send_push(...) for each push in sync.init_pushes()   # version 0 of every fragment
    each inner step:  sync.sync(step, tokens, transport)             # or offer(...) + after_step(...)

`arrays` is any ArrayAdapter (learners/torch/adapter.py is the torch one); the network is a Transport
injected by the caller (learners/bus_client.py over NATS, an in-memory fake in tests). Nothing here
blocks: pushes are handed to the transport, incoming globals are queued and applied, in version order,
at the next step boundary. The anchor of a fragment is the broadcast shadow itself: the exact values
of its newest applied global version, bit-identical on every learner.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from yeto.learners.layout import Layout, TensorSpec, plan_layout
from yeto.schemas import codecs
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, apply_global, sha256
from yeto.schemas.recipe import SyncConfig


class ArrayAdapter(Protocol):
    def names(self) -> list[str]: ...
    def shape(self, name: str) -> tuple[int, ...]: ...
    def dtype(self, name: str) -> str: ...
    def read(self, name: str) -> np.ndarray: ...      # f32; may be a live view, copied before the next step
    def write(self, name: str, value: np.ndarray) -> None: ...


class Transport(Protocol):
    def send_push(self, header: FragmentHeader, payload: bytes) -> None: ...   # non-blocking: queue and return
    def poll_globals(self) -> list[tuple[FragmentHeader, bytes]]: ...        # chunks received since the last poll


@dataclass(frozen=True)
class Push:
    header: FragmentHeader          # message-level header; split_chunks adds the chunk fields
    payload: bytes


def push_due(step: int, fragment: int, inner_steps: int, num_fragments: int) -> bool:
    """Fragment p is pushed every H steps at offset p*H/P (streaming: about one fragment in flight)."""
    return step >= 1 and step % inner_steps == (fragment * inner_steps // num_fragments) % inner_steps


class DilocoSync:
    """One learner's side of the protocol: counters, anchors (= shadows), error feedback, the globals queue."""

    def __init__(self, arrays: ArrayAdapter, config: SyncConfig, *, run_id: str, learner: str, generation: int = 0) -> None:
        self.arrays, self.config, self.run_id, self.learner, self.generation = arrays, config, run_id, learner, generation
        specs = [TensorSpec(n, tuple(arrays.shape(n)), arrays.dtype(n)) for n in arrays.names()]
        self.layout: Layout = plan_layout(specs, config.num_fragments)
        self.active = self.layout.active
        self.anchors = {p: self._flat(p) for p in self.active}           # own initial values until a global lands
        self.versions: dict[int, int | None] = dict.fromkeys(self.active)
        self.c_tokens = dict.fromkeys(self.active, 0)
        self.c_steps = dict.fromkeys(self.active, 0)
        self.step, self.step_time_s, self.num_dropped, self.changed = 0, 0.0, 0, False
        self.feedback = codecs.ErrorFeedback(config.codec_up) if config.codec_up == "q4" else None
        self.assembler = ChunkAssembler(max_pending=4 * max(1, len(self.active)))
        self.queue: dict[int, dict[tuple[str, int], tuple[FragmentHeader, bytes]]] = {p: {} for p in self.active}
        self.pushed: dict[int, tuple[int, int]] = {}   # fragment -> (c_tokens, c_steps) its last push carried

    @property
    def fingerprint(self) -> str:
        return self.layout.fingerprint

    def init_pushes(self) -> list[Push]:
        """f32 version-0 candidates of fragments with no global yet (the syncer adopts the first)."""
        return [self._message(p, "init", "f32", codecs.encode("f32", self.anchors[p])) for p in self.active if self.versions[p] is None]

    def offer(self, header: FragmentHeader, chunk: bytes) -> None:
        """Queue one chunk of a keyframe or delta; applied at the next step boundary. Never raises on bad input."""
        if header.kind not in ("keyframe", "delta") or header.fingerprint != self.fingerprint or header.fragment not in self.queue:
            return
        try:
            payload = self.assembler.add(header, chunk)
        except FragmentError:
            self.num_dropped += 1        # a later keyframe repairs the gap
            return
        if payload is not None and header.numel == self.layout.numel(header.fragment):
            self.queue[header.fragment][(header.kind, header.version)] = (header, payload)

    def catch_up(self) -> bool:
        """Apply every queued global version; True if parameters changed."""
        return any([self._apply(p) for p in self.active])

    def after_step(self, step: int, tokens: int, *, step_time_s: float | None = None) -> list[Push]:
        """The step boundary after inner step `step`: count, apply newer globals, return the pushes due."""
        self.step = step
        if step_time_s is not None:
            self.step_time_s = step_time_s if not self.step_time_s else 0.8 * self.step_time_s + 0.2 * step_time_s
        for p in self.active:
            self.c_tokens[p] += tokens
            self.c_steps[p] += 1
        self.changed = self.catch_up()
        cfg = self.config
        return [self._push(p) for p in self.active if push_due(step, p, cfg.inner_steps, cfg.num_fragments)]

    def sync(self, step: int, tokens: int, transport: Transport, *, step_time_s: float | None = None) -> bool:
        """Poll globals, run the step boundary, hand the pushes to the transport; True if parameters changed."""
        for header, chunk in transport.poll_globals():
            self.offer(header, chunk)
        for push in self.after_step(step, tokens, step_time_s=step_time_s):
            transport.send_push(push.header, push.payload)
        return self.changed

    # -- internals ------------------------------------------------------------------------------------
    def _flat(self, p: int) -> np.ndarray:
        parts = [np.asarray(self.arrays.read(t.name), dtype=np.float32).reshape(-1) for t in self.layout.fragments[p]]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def final_pushes(self) -> list[Push]:
        """At the end of training: push every fragment with progress not pushed yet (the last partial interval)."""
        return [self._push(p) for p in self.active if self.c_steps[p] > self.pushed.get(p, (0, 0))[1]]

    def _push(self, p: int) -> Push:
        self.pushed[p] = (self.c_tokens[p], self.c_steps[p])
        d = self._flat(p) - self.anchors[p]
        payload = self.feedback.encode(p, d) if self.feedback else codecs.encode(self.config.codec_up, d)
        return self._message(p, "push", self.config.codec_up, payload)

    def _message(self, p: int, kind: str, codec: str, payload: bytes) -> Push:
        header = FragmentHeader(run_id=self.run_id, learner=self.learner, generation=self.generation, fragment=p, kind=kind,
                                role=self.layout.roles[p], base_version=self.versions[p] or 0, local_step=self.step,
                                c_steps=self.c_steps[p], c_tokens=self.c_tokens[p], step_time_s=self.step_time_s,
                                fingerprint=self.fingerprint, codec=codec, numel=self.layout.numel(p), sha256=sha256(payload))
        return Push(header, payload)

    def _apply(self, p: int) -> bool:
        queue, start = self.queue[p], self.versions[p]
        while True:
            v = self.versions[p]
            if v is not None and ("delta", v + 1) in queue:
                header, payload = queue.pop(("delta", v + 1))
            else:
                newer = [k for kind, k in queue if kind == "keyframe" and (v is None or k > v)]
                if not newer:
                    break
                header, payload = queue.pop(("keyframe", max(newer)))
            self.anchors[p] = apply_global(self.anchors[p] if v is not None else None, header, payload)
            self.versions[p] = header.version
        for key in [k for k in queue if self.versions[p] is not None and k[1] <= self.versions[p]]:
            del queue[key]
        if self.versions[p] == start:
            return False
        self._blend(p)
        # The counts a push carried are now in the global; what was trained since that push is not and
        # still belongs to the next push (zeroing here lost it from the merge weight and from goodput).
        tokens, steps = self.pushed.pop(p, (0, 0))
        self.c_tokens[p] = max(0, self.c_tokens[p] - tokens)
        self.c_steps[p] = max(0, self.c_steps[p] - steps)
        return True

    def _blend(self, p: int) -> None:
        alpha, offset, shadow = self.config.alpha, 0, self.anchors[p]
        for t in self.layout.fragments[p]:
            global_part = shadow[offset:offset + t.numel].reshape(t.shape)
            offset += t.numel
            value = global_part.copy() if alpha == 0 else alpha * np.asarray(self.arrays.read(t.name), dtype=np.float32) + (1 - alpha) * global_part
            self.arrays.write(t.name, value.astype(np.float32, copy=False))
