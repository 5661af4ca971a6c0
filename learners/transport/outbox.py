"""What a learner has still to send: its pushes in order and a queue of events; thread-safe.

A push made while the fragment's previous one is unanswered carries only the progress since that one
(learners/diloco_sync.py), so a queued push is never dropped for a newer one: the learner takes a push not sent yet
back (`take_back`) and folds it into the next, so while the server is away the outbox holds one push per fragment
waiting (and one on its way), however long training goes on. Until 2026-12-06 a newer push replaced the one waiting,
whose progress the syncer then never saw: a learner whose bus lagged its pushes lost that progress from the run.
Events go first (they are small), and between a push's chunks too. `send_one` publishes the oldest item over the
bus it is given.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Protocol

from yeto.schemas.base import Event
from yeto.schemas.fragments import FragmentHeader, split_chunks
from yeto.schemas.subjects import fragment_subject

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """The part of the bus (yeto.infra.bus.Bus) the outbox uses."""

    async def publish(self, msg: Event, *, retry_for: float = ...) -> int: ...

    async def publish_raw(self, subject: str, payload: bytes, *, msg_id: str | None = ...,
                          headers: dict[str, str] | None = ..., retry_for: float = ...) -> int: ...


class Outbox:
    def __init__(self, *, max_events: int = 1000) -> None:
        self._pushes: deque[tuple[FragmentHeader, bytes]] = deque()
        self._sending: tuple[FragmentHeader, bytes] | None = None    # the push on its way (some chunks may be out)
        self._events: deque[Event] = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.bytes_sent = 0

    def put_push(self, header: FragmentHeader, payload: bytes) -> None:
        with self._lock:
            self._pushes.append((header, payload))

    def take_back(self, fragment: int) -> tuple[FragmentHeader, bytes] | None:
        """The push of `fragment` queued and not yet on its way, removed; None if there is none (sent, or on its way:
        a chunk of it may be in the stream, so it is sent whole, its message ids de-duplicating a repeat)."""
        with self._lock:
            for i in range(len(self._pushes) - 1, -1, -1):
                item = self._pushes[i]
                if item[0].fragment == fragment and item[0].kind == "push" and item is not self._sending:
                    del self._pushes[i]
                    return item
        return None

    def put_event(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def pending(self) -> bool:
        with self._lock:
            return bool(self._pushes or self._events)

    def unsent(self) -> tuple[int, int]:
        """How many pushes and events are still queued (said when the learner leaves with them)."""
        with self._lock:
            return len(self._pushes), len(self._events)

    async def send_one(self, bus: Publisher) -> bool:
        """Publish the oldest queued item over `bus`; True if something was published,
        False if the outbox is empty or the server is away (the item stays queued)."""
        with self._lock:
            event = self._events[0] if self._events else None
            item = self._pushes[0] if self._pushes and event is None else None
            if item is not None:
                self._sending = item      # from its first chunk on, until it is out (a failed one is sent again)
        try:
            if event is not None:
                await bus.publish(event, retry_for=2)
                with self._lock:
                    self._events.popleft()
                return True
            if item is None:
                return False
            await self._send_push(bus, *item)
        except ConnectionError as e:  # keep training; the caller retries with backoff
            log.info("learner: publish failed, will retry: %s", e)
            return False
        with self._lock:
            self._pushes.popleft()                # still the first: a push on its way is never taken back
            self._sending = None
        return True

    async def _send_events(self, bus: Publisher) -> None:
        """Every queued event, oldest first. Between a push's chunks: a push that takes minutes over a slow link must
        not hold back the learner's progress, the launcher's only sign that it lives (services/launcher/liveness.py)."""
        while True:
            with self._lock:
                event = self._events[0] if self._events else None
            if event is None:
                return
            await bus.publish(event, retry_for=2)
            with self._lock:
                self._events.popleft()

    async def _send_push(self, bus: Publisher, header: FragmentHeader, payload: bytes) -> None:
        for i, (h, chunk) in enumerate(split_chunks(header, payload)):
            if i:
                await self._send_events(bus)
            # The run belongs in the id: the stream de-duplicates across all runs for 10 minutes, and the
            # next run on the same stack reuses the learner names.
            msg_id = f"{h.run_id}.{h.learner}.{h.generation}.{h.fragment}.{h.kind}.{h.local_step}.{h.chunk}"
            await bus.publish_raw(fragment_subject(h.run_id, h.fragment, h.learner), chunk, msg_id=msg_id,
                                  headers=h.to_nats(), retry_for=2)
            self.bytes_sent += len(chunk)
