"""A learner's log lines on its run's log stream (YETO_LOG), so `yeto logs` reads a cloud island as it reads a local one.

`BusLogHandler` is a logging handler: each record becomes one plain line (`<UTC time> <LEVEL> <logger>: <message>`)
appended to a bounded queue, and that is all `emit` does, so training never waits on the network. A thread of its
own, with a connection of its own (it starts before the model is built, when a set-up failure is most likely),
publishes the queue to `yeto.log.<run>.<learner>` in messages of up to 64 lines, at most every 0.5 s. While the
bus is away the queue keeps the newest lines; the dropped ones are counted, and the next message says how many.
The secrets it is given are masked in every line; logs_setup.py installs it with the process's own. Given the run's
head rendezvous, its connection follows a moved head as the transport's does (rendezvous.py).
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque

from yeto.infra.bus import connect as connect_bus
from yeto.infra.bus.nats_bus import NatsBus
from yeto.learners.transport import rendezvous
from yeto.learners.transport.thread import BusThread
from yeto.schemas.subjects import log_subject

BATCH_LINES, EVERY_S, MAX_QUEUED, MAX_LINE = 64, 0.5, 10_000, 16_384   # 64 lines of 16 KiB stay far below max_payload


class BusLogHandler(logging.Handler):
    def __init__(self, nats_url: str, *, run_id: str, learner: str, generation: int, secrets: tuple[str, ...] = (),
                 batch_lines: int = BATCH_LINES, every_s: float = EVERY_S, max_queued: int = MAX_QUEUED,
                 head_rendezvous: str | None = None) -> None:
        super().__init__(logging.INFO)
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        formatter.converter, formatter.default_time_format, formatter.default_msec_format = time.gmtime, \
            "%Y-%m-%dT%H:%M:%S", "%s.%03dZ"     # UTC to the millisecond: islands in many time zones read as one
        self.setFormatter(formatter)
        self.url, self.subject, self.batch_lines, self.every_s = nats_url, log_subject(run_id, learner), batch_lines, every_s
        self.run_id, self.rendezvous = run_id, head_rendezvous
        self.msg_prefix = f"{run_id}.{learner}.{generation}.{os.urandom(4).hex()}"   # this process's batches, for de-dup
        self.secrets = tuple(s for s in secrets if len(s) >= 8)   # short values would mask ordinary words
        self.lines: deque[str] = deque(maxlen=max_queued)
        self.num_dropped = self.num_sent = self.num_batches = 0
        self._queue_lock, self._stopping, self._wake = threading.Lock(), threading.Event(), asyncio.Event()
        self.connected = threading.Event()
        self.thread_name = f"logs-{learner}"
        self.thread = BusThread(self.thread_name, self._main)
        self.thread.start()

    def filter(self, record: logging.LogRecord) -> bool:
        # Not this handler's own connection's complaints (they would feed on themselves while the bus is away),
        # and of other libraries only warnings and worse (an HTTP client says INFO at every request).
        return (record.threadName != self.thread_name and bool(super().filter(record))
                and (record.levelno >= logging.WARNING or record.name.startswith("yeto")))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            for secret in self.secrets:
                line = line.replace(secret, "***")
            with self._queue_lock:
                if len(self.lines) == self.lines.maxlen:
                    self.num_dropped += 1
                self.lines.append(line if len(line) <= MAX_LINE else line[:MAX_LINE] + " [cut]")
                full = len(self.lines) >= self.batch_lines
            if full:
                self.thread.call(self._wake.set)
        except Exception:  # noqa: BLE001 - logging never raises into the code that logs
            self.handleError(record)

    def _take(self) -> list[str]:
        with self._queue_lock:
            batch = [self.lines.popleft() for _ in range(min(self.batch_lines, len(self.lines)))]
            if self.num_dropped:
                batch.insert(0, f"[{self.num_dropped} log lines dropped while the bus was away]")
                self.num_dropped = 0
        return batch

    async def _main(self) -> None:
        if self.rendezvous:
            self.url = await asyncio.to_thread(rendezvous.start_url, self.rendezvous, self.run_id, self.url)
        try:
            bus = await connect_bus(self.url, name=f"logs-{self.subject}", connect_timeout=3600)
        except ConnectionError:   # never reached: the lines stay queued (bounded) and the learner trains on
            return
        moves = asyncio.ensure_future(rendezvous.follow(bus.nc, self.rendezvous, self.run_id, self.url)) \
            if self.rendezvous and isinstance(bus, NatsBus) else None
        self.connected.set()
        held: list[str] = []                 # a batch whose publish failed: sent again, under the same id
        delay = self.every_s
        while True:
            stopping = self._stopping.is_set()
            batch = held or self._take()
            if batch:
                try:
                    await bus.publish_raw(self.subject, "\n".join(batch).encode(),
                                          msg_id=f"{self.msg_prefix}.{self.num_batches}", retry_for=2)
                    held, delay = [], self.every_s
                    self.num_batches, self.num_sent = self.num_batches + 1, self.num_sent + len(batch)
                    if len(self.lines) >= self.batch_lines or (stopping and self.lines):
                        continue
                except ConnectionError:
                    held, delay = batch, min(delay * 2, 5.0)
            if stopping and (held or not self.lines):   # a failed last publish already waited its 2 s
                break
            self._wake.clear()
            if self._stopping.is_set() and not stopping:   # close() came during this pass: flush now, not after a wait
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
        if moves is not None:
            moves.cancel()
        await bus.close()

    def close(self, flush_s: float = 5.0) -> None:
        """Publish what is queued (waiting at most flush_s), then disconnect. logging.shutdown calls it at exit."""
        if not self._stopping.is_set():
            self._stopping.set()
            self.thread.call(self._wake.set)
            self.thread.stop(flush_s)
        super().close()

