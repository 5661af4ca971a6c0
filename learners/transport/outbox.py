"""What a learner has still to send: the newest push of each fragment and a queue of events; thread-safe.

A push carries everything trained since its anchor, so a newer push of a fragment supersedes one not
sent yet: while the server is away the outbox holds one push per fragment, however long training goes on.
Events go first (they are small), and between a push's chunks too. `send_one` publishes the oldest item over the
bus it is given.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
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
        self._pushes: OrderedDict[tuple[int, str], tuple[FragmentHeader, bytes]] = OrderedDict()
        self._events: deque[Event] = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.bytes_sent = 0

    def put_push(self, header: FragmentHeader, payload: bytes) -> None:
        key = (header.fragment, header.kind)
        with self._lock:
            self._pushes.pop(key, None)           # re-inserted last: the queue stays in order of arrival
            self._pushes[key] = (header, payload)

    def put_event(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def pending(self) -> bool:
        with self._lock:
            return bool(self._pushes or self._events)

    async def send_one(self, bus: Publisher) -> bool:
        """Publish the oldest queued item over `bus`; True if something was published,
        False if the outbox is empty or the server is away (the item stays queued)."""
        with self._lock:
            event = self._events[0] if self._events else None
            key, item = next(iter(self._pushes.items())) if self._pushes and event is None else (None, None)
        try:
            if event is not None:
                await bus.publish(event, retry_for=2)
                with self._lock:
                    self._events.popleft()
                return True
            if key is None or item is None:
                return False
            await self._send_push(bus, *item)
        except ConnectionError as e:  # keep training; the caller retries with backoff
            log.info("learner: publish failed, will retry: %s", e)
            return False
        with self._lock:
            if self._pushes.get(key) is item:     # not superseded while it was on its way
                del self._pushes[key]
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
