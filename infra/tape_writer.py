"""The tape writer: mirrors the YETO_EVT stream into DuckDB exactly once, and answers read-only SQL on `yeto.tape.sql`.

Exactly once, across crashes: the tape's position is max(seq) of its own rows (seq is the primary key
and a batch is one INSERT), so rows and position commit together. On start the writer (re)creates
its durable pull consumer to begin at max(seq)+1: the file, not the consumer's ack floor, is the
truth (a crash between commit and ack, or a tape file restored from a copy, both come out right).
While running it accepts only the contiguous continuation of what it stored: a redelivered sequence
is skipped; a hole (messages lost with a dropped connection) makes it recreate the consumer at the
next sequence. The consumer acks with AckAll, so one ack per committed batch releases the batch.
Pulls are raw `CONSUMER.MSG.NEXT` requests into one inbox: nats-py's `fetch` (and so the bus protocol's
`Consumer.fetch`) builds per-message metadata and runs several times slower; the stream sequence is read
from the ack subject instead. That makes the writer the one NATS-specific reader outside infra/bus_nats*.py:
it holds a `NatsBus` and uses its connection for the pulls, the AckAll ack and the consumer's position.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from nats.js import api
from nats.js.errors import NotFoundError

from yeto.infra.bus_nats import NatsBus
from yeto.infra.natsserver import ensure_streams
from yeto.infra.tape_responder import answer
from yeto.infra.tape_store import TapeStore, subject_run
from yeto.schemas.subjects import EVERY_EVENT, EVT_STREAM as STREAM, TAPE_SQL

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
    """A SQL request running longer is interrupted and answered with an error."""


def stream_seq(reply: str) -> int:
    """The stream sequence from a JetStream ack subject ($JS.ACK.<stream>.<consumer>.<n>.<sseq>... v1 or v2 form)."""
    tokens = reply.split(".")
    return int(tokens[5] if len(tokens) == 9 else tokens[7])


class TapeWriter:
    def __init__(self, cfg: TapeConfig):
        self.cfg = cfg
        self.store: TapeStore | None = None
        self.bus: NatsBus | None = None
        self.buf: list = []
        self.arrived = asyncio.Event()       # a message (or a pull's end) came in
        self.pull_done = asyncio.Event()
        self.recreate = asyncio.Event()     # a hole or a lost consumer: start again at last_seq + 1
        self.expect_next = False            # False right after (re)creating: the first message may skip a gap the stream itself has
        self.in_request = 0
        self.sub = None
        self.flushing = asyncio.Lock()      # one flush at a time: each starts from the tape's last seq

    async def run(self, stop: asyncio.Event) -> None:
        self.store = await asyncio.to_thread(TapeStore, self.cfg.db)
        self.bus = await NatsBus.connect(self.cfg.nats_url, name=f"tape-{self.cfg.consumer}")
        await ensure_streams(self.bus)
        sql_sub = await self.bus.serve(TAPE_SQL, partial(answer, store=self.store, timeout_s=self.cfg.query_timeout_s,
                                                         max_payload=self.bus.nc.max_payload), queue="tape")
        info = await self.bus.js.stream_info(STREAM)
        if info.state.last_seq < self.store.last_seq:
            log.warning("the tape is at seq %d but the stream only at %d: was the nats store reset? new events "
                        "land once the stream passes the tape", self.store.last_seq, info.state.last_seq)
        log.info("tape %s at seq %d", self.cfg.db, self.store.last_seq)
        await self._start_consumer()
        tasks = [asyncio.create_task(self._pull_loop(stop)), asyncio.create_task(self._flush_loop(stop))]
        stopped = asyncio.create_task(stop.wait())
        try:
            # A loop that dies takes the process down (non-zero exit) so the stack restarts it from the tape.
            await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                if t.done() and t.exception():
                    raise t.exception()
        finally:
            for t in (stopped, *tasks):
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._flush()          # commit what arrived; its ack goes out before the drain
            await sql_sub.close()
            await self.bus.close()
            self.store.close()

    async def _start_consumer(self) -> None:
        js, nc = self.bus.js, self.bus.nc
        if self.sub:
            await self.sub.unsubscribe()
        self.buf, self.expect_next = [], False
        try:
            await js.delete_consumer(STREAM, self.cfg.consumer)
        except NotFoundError:
            pass
        await js.add_consumer(STREAM, api.ConsumerConfig(
            durable_name=self.cfg.consumer, filter_subject=EVERY_EVENT, ack_policy=api.AckPolicy.ALL,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.store.last_seq + 1,
            max_ack_pending=4 * self.cfg.batch, ack_wait=30.0))
        self.inbox = nc.new_inbox()
        self.sub = await nc.subscribe(self.inbox, cb=self._on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        self.recreate.clear()

    async def _on_msg(self, msg) -> None:
        if not msg.data and msg.headers and "Status" in msg.headers:  # 408 expired, 404 none, 409 ...: the pull is over
            status, desc = msg.headers.get("Status"), msg.headers.get("Description", "")
            if status not in ("404", "408") and "MaxAckPending" not in desc:
                log.warning("pull ended with %s %s; recreating the consumer", status, desc)
                self.recreate.set()
            self.pull_done.set()
        else:
            self.buf.append(msg)
            self.in_request -= 1
            if self.in_request <= 0:
                self.pull_done.set()
        self.arrived.set()

    async def _pull_loop(self, stop: asyncio.Event) -> None:
        nc, cfg = self.bus.nc, self.cfg
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{cfg.consumer}"
        while not stop.is_set():
            if self.recreate.is_set():
                await self._flush()
                try:
                    await self._start_consumer()
                except Exception as e:  # noqa: BLE001 - the server may be restarting: try again shortly
                    log.warning("recreating the consumer failed: %r", e)
                    await asyncio.sleep(0.5)
                    continue
            if len(self.buf) >= 2 * cfg.batch:  # back-pressure: DuckDB is behind
                await asyncio.sleep(0.005)
                continue
            self.pull_done.clear()
            self.in_request = cfg.batch
            request = {"batch": cfg.batch, "expires": int(cfg.pull_expires_s * 1e9)}
            try:
                await nc.publish(subject, json.dumps(request).encode(), reply=self.inbox)
                await asyncio.wait_for(self.pull_done.wait(), cfg.pull_expires_s + 2.0)
            except asyncio.TimeoutError:
                pass  # the request or its end was lost (reconnect): ask again
            except Exception as e:  # noqa: BLE001 - disconnected: nats-py reconnects; keep asking
                log.warning("pull failed: %r", e)
                await asyncio.sleep(0.2)

    async def _flush_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.arrived.wait()
            self.arrived.clear()
            if self.buf and len(self.buf) < self.cfg.batch and not self.pull_done.is_set():
                await asyncio.sleep(self.cfg.linger_s)
            await self._flush()

    async def _flush(self) -> None:
        async with self.flushing:
            msgs, self.buf = self.buf, []
            if msgs and self.store:
                await self._commit(msgs)

    async def _commit(self, msgs: list) -> None:
        last = self.store.last_seq
        seqs, runs, raws, acked = [], [], [], None
        for m in msgs:
            seq = stream_seq(m.reply)
            if seq <= last:       # redelivered: already on the tape
                acked = m
                continue
            if self.expect_next and seq != last + 1:
                log.warning("hole after seq %d (got %d): recreating the consumer", last, seq)
                self.recreate.set()
                break
            self.expect_next = True
            seqs.append(seq)
            runs.append(subject_run(m.subject))
            raws.append(m.data.decode("utf-8", "replace"))
            last, acked = seq, m
        if seqs:
            await asyncio.to_thread(self.store.append, seqs, runs, raws)
        if acked is not None:
            try:
                await self.bus.nc.publish(acked.reply, b"+ACK")
            except Exception as e:  # noqa: BLE001 - a lost ack only means redelivery, which is skipped
                log.warning("ack failed: %r", e)
