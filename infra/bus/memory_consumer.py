"""The in-memory bus's pull consumers: a durable's state (cursor, deliveries awaiting an ack) is shared by its fetchers."""
from __future__ import annotations

import asyncio
import bisect
import logging

from yeto.infra.bus.memory_stream import MemoryStream
from yeto.schemas.subjects import subject_matches

log = logging.getLogger(__name__)
NEVER = float("inf")


class MemoryDelivery:
    __slots__ = ("subject", "data", "headers", "seq", "num_pending", "_state")

    def __init__(self, subject: str, data: bytes, headers: dict[str, str], seq: int, num_pending: int,
                 state: ConsumerState | None):
        self.subject, self.data, self.headers, self.seq, self.num_pending = subject, data, headers, seq, num_pending
        self._state = state

    async def ack(self) -> None:
        if self._state:
            self._state.settle(self.seq)

    async def nak(self, delay_s: float | None = None) -> None:
        if self._state:
            self._state.due_in(self.seq, delay_s or 0.0)

    async def term(self) -> None:
        if self._state:
            self._state.settle(self.seq)

    async def in_progress(self) -> None:
        if self._state:
            self._state.due_in(self.seq, self._state.ack_wait_s, only_pending=True)


class ConsumerState:
    """Cursor (last sequence handed out as new) plus the deliveries awaiting an ack, with when each is due again."""

    def __init__(self, stream: MemoryStream, filters: tuple[str, ...], *, after_seq: int, ack: bool,
                 ack_wait_s: float, max_deliver: int, max_ack_pending: int):
        self.stream, self.filters, self.cursor, self.ack = stream, filters, after_seq, ack
        self.ack_wait_s, self.max_deliver, self.max_ack_pending = ack_wait_s, max_deliver, max_ack_pending
        self.due: dict[int, float] = {}          # seq -> loop time it is redelivered at (unacked deliveries)
        self.count: dict[int, int] = {}          # seq -> deliveries so far

    def matches(self, subject: str) -> bool:
        return any(subject_matches(f, subject) for f in self.filters)

    def undelivered(self) -> list[int]:
        return [s for s in range(self.cursor + 1, self.stream.last_seq + 1)
                if (m := self.stream.msgs.get(s)) and self.matches(m[0])]

    def take(self, max_msgs: int, now: float) -> list[MemoryDelivery]:
        seqs: list[int] = []
        for seq, at in sorted(self.due.items()):
            if len(seqs) < max_msgs and at <= now:
                if seq not in self.stream.msgs or 0 < self.max_deliver <= self.count[seq]:
                    del self.due[seq]    # gone from the stream, or delivered as often as allowed
                else:
                    seqs.append(seq)
        fresh = self.undelivered()
        room = max_msgs - len(seqs) if not self.ack else min(max_msgs - len(seqs), self.max_ack_pending - len(self.due))
        new = fresh[:max(room, 0)]
        if new:
            self.cursor = new[-1]
        out = []
        for seq in seqs + new:
            self.count[seq] = self.count.get(seq, 0) + 1
            if self.ack:
                self.due[seq] = now + self.ack_wait_s
            subject, data, headers = self.stream.msgs[seq]
            pending = len(fresh) - bisect.bisect_right(fresh, seq)
            out.append(MemoryDelivery(subject, data, dict(headers), seq, pending, self if self.ack else None))
        return out

    def settle(self, seq: int) -> None:
        self.due.pop(seq, None)
        if self.stream.spec.retention == "workqueue":  # acked or terminated: the work queue forgets it
            self.stream.remove(seq)

    def due_in(self, seq: int, delay_s: float, only_pending: bool = False) -> None:
        if only_pending and seq not in self.due:
            return
        self.due[seq] = asyncio.get_running_loop().time() + delay_s
        self.stream.notify()   # a fetch waiting for messages looks again

    def next_due(self) -> float:
        return min(self.due.values(), default=NEVER)


class MemoryConsumer:
    def __init__(self, state: ConsumerState):
        self.state = state

    async def fetch(self, max_msgs: int, timeout_s: float) -> list[MemoryDelivery]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await asyncio.sleep(0)  # a fetch is a suspension point on a real bus too
        while True:
            now = loop.time()
            if out := self.state.take(max_msgs, now):
                return out
            if now >= deadline:
                return []
            changed = self.state.stream.changed
            try:
                await asyncio.wait_for(changed.wait(), max(0.0, min(deadline, self.state.next_due()) - now))
            except asyncio.TimeoutError:
                pass

    async def num_pending(self) -> int:
        return len(self.state.undelivered())

    async def close(self) -> None:
        pass
