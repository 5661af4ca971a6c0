"""The bus in memory, for pure tests: the streams of schemas/subjects.py with their retention, in one process.

Faithful where Yeto relies on it (tests/infra/test_infra_bus_contract.py runs the same checks against
nats-server): sequences per stream, de-duplication by message id within the stream's window, work-queue
streams dropping a message once acked (or terminated), `max_msgs_per_subject`, durable consumers shared
by fetchers, nak with delay, max_deliver, max_ack_pending. Simplified, honestly:
- ack_wait: an unacked delivery becomes due again `ack_wait_s` after it was handed out (or after its last
  in_progress), and is redelivered by the next fetch that runs after that time: no timer runs on its own.
- `max_age_s` is not enforced (tests are shorter than a stream's age limit); payload sizes are not checked.
- A request whose handler raises fails at once with TimeoutError instead of waiting out its timeout.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence

from yeto.infra.bus.memory_consumer import ConsumerState, MemoryConsumer
from yeto.infra.bus.memory_stream import MemoryStream
from yeto.infra.bus.memory_watch import MemorySubscription, MemoryWatch
from yeto.infra.bus.types import Deliver, Delivery, NoResponders, subject_of
from yeto.schemas.base import Message, to_bytes
from yeto.schemas.subjects import STREAMS, StreamSpec, stream_for, subject_matches

log = logging.getLogger(__name__)


class MemoryBus:
    """One in-memory server and its connection at once; `MemoryBus()` replaces `connect(url)`."""

    def __init__(self, name: str = "memory", specs: tuple[StreamSpec, ...] = STREAMS):
        self.name = name
        self.streams = {spec.name: MemoryStream(spec) for spec in specs}
        self.durables: dict[tuple[str, str], ConsumerState] = {}
        self.servers: list[tuple[str, Callable[[bytes], Awaitable[bytes]]]] = []
        self._turn = itertools.count()
        self.watches: list[MemoryWatch] = []

    def stream(self, subject: str) -> MemoryStream:
        try:
            return self.streams[stream_for(subject).name]
        except KeyError:
            raise ConnectionError(f"no stream holds {subject}") from None

    async def publish(self, msg: Message, *, retry_for: float = 60.0) -> int:
        return await self.publish_raw(subject_of(msg), to_bytes(msg), msg_id=msg.id, retry_for=retry_for)

    async def publish_raw(self, subject: str, payload: bytes, *, msg_id: str | None = None,
                          headers: dict[str, str] | None = None, retry_for: float = 60.0) -> int:
        await asyncio.sleep(0)  # a publish is a suspension point on a real bus too
        return self.stream(subject).append(subject, bytes(payload), dict(headers or {}), msg_id,
                                           asyncio.get_running_loop().time())

    async def consumer(self, subjects: Sequence[str], *, durable: str | None = None, after_seq: int = 0,
                       ack: bool = True, ack_wait_s: float = 60.0, max_deliver: int = -1,
                       max_ack_pending: int = 1000) -> MemoryConsumer:
        stream = self.stream(subjects[0])
        key = (stream.spec.name, durable or "")
        state = self.durables.get(key) if durable else None
        if state is None:
            state = ConsumerState(stream, tuple(subjects), after_seq=after_seq, ack=ack, ack_wait_s=ack_wait_s,
                                  max_deliver=max_deliver, max_ack_pending=max_ack_pending)
            if durable:
                self.durables[key] = state
        return MemoryConsumer(state)

    async def watch(self, subject: str, callback: Callable[[Delivery], Awaitable[None]], *,
                    deliver: Deliver = "all", headers_only: bool = False) -> MemoryWatch:
        watch = MemoryWatch(self.stream(subject), subject, callback, deliver=deliver, headers_only=headers_only)
        self.watches.append(watch)
        return watch

    async def last(self, subject: str) -> tuple[dict[str, str], bytes] | None:
        stream = self.stream(subject)
        seqs = [s for subj, ss in stream.by_subject.items() if subject_matches(subject, subj) for s in ss]  # wildcards too
        if not seqs:
            return None
        _, data, headers = stream.msgs[max(seqs)]
        return dict(headers), data

    async def direct_get(self, stream: str, seq: int, *, timeout_s: float = 120.0) -> tuple[dict[str, str], bytes] | None:
        stored = self.streams[stream].msgs.get(seq)
        return None if stored is None else (dict(stored[2]), stored[1])

    async def direct_last(self, subject: str, *, timeout_s: float = 120.0) -> tuple[int, dict[str, str], bytes] | None:
        stream = self.stream(subject)
        seqs = [s for s in stream.by_subject.get(subject, ()) if s in stream.msgs]
        if not seqs:
            return None
        _, data, headers = stream.msgs[max(seqs)]
        return max(seqs), dict(headers), data

    async def request(self, subject: str, payload: bytes, *, timeout_s: float) -> bytes:
        handlers = [h for pattern, h in self.servers if subject_matches(pattern, subject)]
        if not handlers:
            raise NoResponders(f"nobody serves {subject}")
        handler = handlers[next(self._turn) % len(handlers)]   # like a queue group: one of them answers
        try:
            return await asyncio.wait_for(handler(payload), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer on {subject} within {timeout_s:.0f}s") from None
        except Exception as e:  # a failing server does not answer: the requester sees a timeout
            log.exception("handler of %s failed", subject)
            raise TimeoutError(f"no answer on {subject}: {e!r}") from None

    async def serve(self, subject: str, handler: Callable[[bytes], Awaitable[bytes]], *,
                    queue: str = "", concurrency: int = 1) -> MemorySubscription:
        slots = asyncio.Semaphore(max(1, concurrency))     # as over NATS: at most `concurrency` answered at once

        async def bounded(payload: bytes) -> bytes:
            async with slots:
                return await handler(payload)
        entry = (subject, bounded)
        self.servers.append(entry)
        return MemorySubscription(lambda: self.servers.remove(entry))

    async def close(self) -> None:
        """Stop the watches still running (a closed NATS connection ends its subscriptions too)."""
        for watch in self.watches:
            await watch.close()
        self.watches.clear()
