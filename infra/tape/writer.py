"""The tape writer: mirrors the YETO_EVT stream into DuckDB exactly once, and answers read-only SQL on `yeto.tape.sql`.

Exactly once, across crashes: the tape's position is max(seq) of its own rows (seq is the primary key
and a batch is one INSERT), so rows and position commit together. On start the writer (re)creates
its durable pull consumer to begin at max(seq)+1: the file, not the consumer's ack floor, is the
truth (a crash between commit and ack, or a tape file restored from a copy, both come out right).
While running it accepts only the contiguous continuation of what it stored: a redelivered sequence
is skipped; a hole (messages lost with a dropped connection) makes it recreate the consumer at the
next sequence. One ack per committed batch releases the batch. The pulls are NATS-specific
(infra/bus/nats_pull.py: raw batch requests, several times faster than a protocol fetch).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.bus.nats_pull import RawPull, stream_seq, stream_ts
from yeto.infra.nats.server import ensure_streams
from yeto.infra.tape.limits import Limits
from yeto.infra.tape.responder import Responder
from yeto.infra.tape.store import TapeStore
from yeto.schemas.subjects import EVERY_EVENT, TAPE_SQL
from yeto.schemas.subjects import EVT_STREAM as STREAM

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TapeConfig:
    nats_url: str
    """The stack's NATS URL."""
    db: Path
    """The DuckDB tape file (created if missing)."""
    consumer: str = "tape"
    """Durable consumer name on YETO_EVT; one tape file per name."""
    batch: int = 5000
    """Messages per pull request and, at most, per committed INSERT under load."""
    linger_s: float = 0.02
    """How long a partial batch waits for more messages before it is committed (latency when idle)."""
    pull_expires_s: float = 1.0
    """Lifetime of one pull request at the server."""
    query_timeout_s: float = 30.0
    """A SQL request's process running longer is killed and the request answered with an error."""
    drain_s: float = 5.0
    """On a stop, how long the writer goes on landing what the stream already holds before it exits."""
    max_batch_bytes: int = 32 << 20
    """Payload bytes per pull and per INSERT: DuckDB parses a batch's JSON in memory, under its 1 GB limit."""
    max_event_bytes: int = 4 << 20
    """An event over this is stored as a stub (limits.py); the event stream refuses bigger ones anyway (MAX_EVENT_BYTES)."""
    learner_events_per_s: float = 20.0
    """Events a second one learner subject may put on the tape (a token bucket); over it, stubs (limits.py)."""
    learner_burst: int = 200
    """How many events a learner subject may send at once before its rate applies."""


class TapeWriter:
    def __init__(self, cfg: TapeConfig):
        self.cfg = cfg
        self.store: TapeStore | None = None
        self.bus: NatsBus | None = None
        self.pull: RawPull | None = None
        self.expect_next = False            # False right after (re)creating: the first may skip a gap the stream has
        self.flushing = asyncio.Lock()      # one flush at a time: each starts from the tape's last seq
        self.closing = asyncio.Event()      # the flush loop ends after the commit in hand
        self.limits = Limits(cfg.max_event_bytes, cfg.learner_events_per_s, cfg.learner_burst)

    async def run(self, stop: asyncio.Event) -> None:
        self.store = await asyncio.to_thread(TapeStore, self.cfg.db)
        self.bus = await NatsBus.connect(self.cfg.nats_url, name=f"tape-{self.cfg.consumer}")
        await ensure_streams(self.bus)
        responder = Responder(self.store, self.flushing, timeout_s=self.cfg.query_timeout_s,
                              max_payload=self.bus.nc.max_payload)     # each query in a process of its own
        sql_sub = await self.bus.serve(TAPE_SQL, responder.answer, queue="tape", concurrency=responder.concurrency)
        pull = RawPull(self.bus, STREAM, self.cfg.consumer, EVERY_EVENT, batch=self.cfg.batch,
                       expires_s=self.cfg.pull_expires_s, max_bytes=self.cfg.max_batch_bytes)
        if (stream_last := await pull.last_seq()) < self.store.last_seq:
            log.warning("the tape is at seq %d but the stream only at %d: was the nats store reset? new events "
                        "land once the stream passes the tape", self.store.last_seq, stream_last)
        log.info("tape %s at seq %d", self.cfg.db, self.store.last_seq)
        await self._restart(pull)
        self.pull = pull
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(self._pull_loop(stop)),
                                          asyncio.create_task(self._flush_loop())]
        stopped = asyncio.create_task(stop.wait())
        try:
            # A loop that dies takes the process down (non-zero exit) so the stack restarts it from the tape.
            await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                if t.done() and (error := t.exception()) is not None:
                    raise error
        finally:
            # The flush loop is told, never cancelled: a commit cancelled mid-INSERT would run on in its thread
            # while the next one (or close) took the same connection.
            self.closing.set()
            pull.arrived.set()
            for t in (stopped, tasks[0]):
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._flush()          # commit what arrived; its ack goes out before the drain
            if stop.is_set():
                await self._drain()
            await sql_sub.close()
            await responder.close()
            await self.bus.close()
            self.store.close()

    async def _drain(self) -> None:
        """Land what the stream held when the stop came, up to `drain_s`: a stack stopped right after an event
        (the head once RunCopiedBack is in) still has that event on its tape."""
        pull, store = self.pull, self.store
        assert pull is not None and store is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.drain_s
        try:
            target = await asyncio.wait_for(pull.last_seq(), self.cfg.drain_s)
            while store.last_seq < target and loop.time() < deadline:
                if pull.recreate.is_set():
                    await self._restart(pull)
                before = store.last_seq
                await asyncio.wait_for(pull.pull(no_wait=True), max(deadline - loop.time(), 0.01))
                await self._flush()
                if store.last_seq == before and not pull.recreate.is_set() and not pull.unanswered:
                    break                # nothing more for this consumer (the stream's tail is not events)
        except Exception as e:  # noqa: BLE001 - a drain is best effort: the next start resumes from the tape
            log.warning("drain on stop ended early at seq %d: %r", store.last_seq, e)
        log.info("tape stopped at seq %d", store.last_seq)

    async def _restart(self, pull: RawPull) -> None:
        assert self.store is not None
        await pull.start_at(self.store.last_seq + 1)
        self.expect_next = False

    async def _pull_loop(self, stop: asyncio.Event) -> None:
        pull = self.pull
        assert pull is not None
        while not stop.is_set():
            if pull.recreate.is_set():
                await self._flush()
                try:
                    await self._restart(pull)
                except Exception as e:  # noqa: BLE001 - the server may be restarting: try again shortly
                    log.warning("recreating the consumer failed: %r", e)
                    await asyncio.sleep(0.5)
                    continue
            if len(pull.buf) >= 2 * self.cfg.batch or pull.buf_bytes() >= 2 * self.cfg.max_batch_bytes:   # DuckDB is behind
                await asyncio.sleep(0.005)
                continue
            await pull.pull()

    async def _flush_loop(self) -> None:
        pull = self.pull
        assert pull is not None
        while not self.closing.is_set():
            await pull.arrived.wait()
            pull.arrived.clear()
            if pull.buf and len(pull.buf) < self.cfg.batch and not pull.pull_done.is_set():
                await asyncio.sleep(self.cfg.linger_s)
            await self._flush()

    async def _flush(self) -> None:
        async with self.flushing:
            if self.pull is None:
                return
            msgs, self.pull.buf = self.pull.buf, []
            if msgs and self.store:
                await self._commit(msgs)

    async def _commit(self, msgs: list[Any]) -> None:
        store, pull = self.store, self.pull
        assert store is not None and pull is not None
        last = store.last_seq
        rows: tuple[list[int], list[str], list[str], list[str | None]] = ([], [], [], [])
        size, acked = 0, None
        for m in msgs:
            seq = stream_seq(m.reply)
            if seq <= last:       # redelivered: already on the tape
                acked = m
                continue
            if self.expect_next and seq != last + 1:
                log.warning("hole after seq %d (got %d): recreating the consumer", last, seq)
                pull.recreate.set()
                break
            self.expect_next = True
            stub = self.limits.stub(m.subject, len(m.data), stream_ts(m.reply))
            raw = m.data.decode("utf-8", "replace") if stub is None else stub[0]
            if rows[0] and size + len(raw) > self.cfg.max_batch_bytes:   # an INSERT's JSON stays within its bytes
                await asyncio.to_thread(store.append, *rows)
                rows, size = ([], [], [], []), 0
            for column, value in zip(rows, (seq, m.subject, raw, None if stub is None else stub[1])):
                column.append(value)
            size += len(raw)
            last, acked = seq, m
        if rows[0]:
            await asyncio.to_thread(store.append, *rows)
        if acked is not None:
            await pull.ack(acked)
