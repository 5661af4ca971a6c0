"""An in-process stand-in for NATS between torch learners and the real SyncerCore, chunked exactly as on the wire.

Pushes and globals are split as NATS carries them (split_chunks, header round trip through NATS headers).

benchmarks/learner_overhead.py times the learner over it; the learner tests use it too (tests/learner/learner_loopback.py).
"""
from __future__ import annotations

import threading
import time

from yeto.learners.api import LocalTransport
from yeto.schemas.fragments import FragmentHeader, split_chunks
from yeto.services.syncer.api import SyncerCore, perform


class Loopback:
    """One syncer core, many learners' inboxes; thread-safe. `syncer_s` is time spent in the core."""

    def __init__(self, core: SyncerCore, chunk_bytes: int = 64 * 1024) -> None:
        self.core, self.chunk_bytes = core, chunk_bytes
        self.lock = threading.Lock()
        self.inboxes: dict[str, list] = {}
        self.events: list = []
        self.syncer_s = 0.0
        self.bytes_up = self.bytes_down = 0

    def _wire(self, header: FragmentHeader, payload: bytes):
        for h, chunk in split_chunks(header, payload, self.chunk_bytes):
            yield FragmentHeader.from_nats(h.to_nats()), bytes(chunk)

    def _handle(self, outputs) -> None:
        perform(outputs, self)

    # outputs.Sink: snapshots are not kept, wake-ups come from polling (every poll ticks the core)
    def chunk(self, header: FragmentHeader, chunk: bytes) -> None:
        self.bytes_down += len(chunk)
        h = FragmentHeader.from_nats(header.to_nats())
        for inbox in self.inboxes.values():
            inbox.append((h, bytes(chunk)))

    def event(self, event) -> None:
        self.events.append(event)

    def snapshot(self, snap) -> None:
        pass

    snapshot_later = snapshot

    def wake(self, at: float) -> None:
        pass

    def transport(self, learner: str):
        loop = self
        inbox = self.inboxes.setdefault(learner, [])

        class Transport(LocalTransport):
            def send_push(self, header, payload):
                with loop.lock:
                    loop.bytes_up += len(payload)
                    started = time.perf_counter()
                    for h, chunk in loop._wire(header, payload):
                        loop._handle(loop.core.receive(h, chunk, time.perf_counter()))
                    loop.syncer_s += time.perf_counter() - started

            def poll_globals(self):
                with loop.lock:
                    started = time.perf_counter()
                    loop._handle(loop.core.tick(time.perf_counter()))
                    loop.syncer_s += time.perf_counter() - started
                    out = list(inbox)
                    inbox.clear()
                return out
        return Transport()
