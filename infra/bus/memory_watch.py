"""The in-memory bus's watches: a task per watch calling back in stream order, and the subscription that stops it."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from yeto.infra.bus.memory_consumer import MemoryDelivery
from yeto.infra.bus.memory_stream import MemoryStream
from yeto.schemas.subjects import subject_matches

log = logging.getLogger(__name__)


class MemorySubscription:
    def __init__(self, on_close: Callable[[], None]):
        self.on_close = on_close

    async def close(self) -> None:
        self.on_close()


class MemoryWatch(MemorySubscription):
    """A task calling back in stream order: from the first message, the last per subject, or new ones only."""

    def __init__(self, stream: MemoryStream, subject: str, callback: Callable, *, deliver: str, headers_only: bool):
        self.stream, self.subject, self.callback, self.headers_only = stream, subject, callback, headers_only
        matching = [s for s, m in stream.msgs.items() if subject_matches(subject, m[0])]
        if deliver == "last_per_subject":
            matching = sorted({stream.msgs[s][0]: s for s in matching}.values())
        self.backlog, self.cursor = (matching, stream.last_seq) if deliver != "new" else ([], stream.last_seq)
        self.task = asyncio.create_task(self._run())
        super().__init__(self._stop)

    def _stop(self) -> None:
        self.task.cancel()

    async def _run(self) -> None:
        while True:
            seqs, self.backlog = self.backlog, []
            seqs += [s for s in range(self.cursor + 1, self.stream.last_seq + 1)
                     if s in self.stream.msgs and subject_matches(self.subject, self.stream.msgs[s][0])]
            self.cursor = self.stream.last_seq
            for i, seq in enumerate(seqs):
                if (stored := self.stream.msgs.get(seq)) is None:
                    continue
                subject, data, headers = stored
                if self.headers_only:
                    data, headers = b"", {**headers, "Nats-Msg-Size": str(len(data))}
                try:
                    await self.callback(MemoryDelivery(subject, data, dict(headers), seq, len(seqs) - i - 1, None))
                except Exception:  # like nats-py: a failing callback loses that message, not the watch
                    log.exception("watch callback on %s failed", self.subject)
            changed = self.stream.changed
            if self.cursor >= self.stream.last_seq:
                await changed.wait()
