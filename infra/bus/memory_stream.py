"""One stream of the in-memory bus: its messages by sequence, per-subject limit, de-duplication by message id."""
from __future__ import annotations

import asyncio
from collections import deque

from yeto.schemas.subjects import StreamSpec


class MemoryStream:
    def __init__(self, spec: StreamSpec):
        self.spec, self.last_seq = spec, 0
        self.msgs: dict[int, tuple[str, bytes, dict[str, str]]] = {}   # seq -> (subject, data, headers), in order
        self.by_subject: dict[str, deque[int]] = {}
        self.ids: dict[str, tuple[int, float]] = {}                    # msg id -> (seq, when stored)
        self.changed = asyncio.Event()                                   # replaced after each change: wakes waiters

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def append(self, subject: str, data: bytes, headers: dict[str, str], msg_id: str | None, now: float) -> int:
        if msg_id:
            window = self.spec.duplicate_window_s
            self.ids = {k: v for k, v in self.ids.items() if now - v[1] < window} if len(self.ids) > 10_000 else self.ids
            if msg_id in self.ids and now - self.ids[msg_id][1] < window:
                return self.ids[msg_id][0]
            headers = {**headers, "Nats-Msg-Id": msg_id}
        self.last_seq += 1
        seq = self.last_seq
        self.msgs[seq] = (subject, data, headers)
        if msg_id:
            self.ids[msg_id] = (seq, now)
        on_subject = self.by_subject.setdefault(subject, deque())
        on_subject.append(seq)
        while 0 < self.spec.max_msgs_per_subject < len(on_subject):
            self.msgs.pop(on_subject.popleft(), None)
        self.notify()
        return seq

    def remove(self, seq: int) -> None:
        if (stored := self.msgs.pop(seq, None)) is not None:
            self.by_subject[stored[0]].remove(seq)
