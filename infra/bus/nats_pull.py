"""Raw batch pulls from one durable JetStream consumer: the tape writer's reader, outside the bus protocol on purpose.

Pulls are raw `CONSUMER.MSG.NEXT` requests into one inbox: nats-py's `fetch` (and so the protocol's
`Consumer.fetch`) builds per-message metadata and runs several times slower; the stream sequence is read
from the ack subject instead. The consumer acks with AckAll, so one ack releases everything before it.
"""
from __future__ import annotations

import asyncio
import json
import logging

from nats.js import api
from nats.js.errors import NotFoundError

from yeto.infra.bus.nats_bus import NatsBus

log = logging.getLogger(__name__)

UNANSWERED_PAUSE_S = 0.25   # after a pull no leader answered: the pause before asking whether the consumer is still there
UNANSWERED_RECREATE_S = 30.0   # ... and how long with no leader before it is recreated anyway (a group that cannot elect)


def stream_seq(reply: str) -> int:
    """The stream sequence from a JetStream ack subject ($JS.ACK.<stream>.<consumer>.<n>.<sseq>... v1 or v2 form)."""
    tokens = reply.split(".")
    return int(tokens[5] if len(tokens) == 9 else tokens[7])


def stream_ts(reply: str) -> float:
    """When the stream stored the message, in seconds since the epoch, from its ack subject (v1 or v2 form)."""
    tokens = reply.split(".")
    return int(tokens[7] if len(tokens) == 9 else tokens[9]) / 1e9


class RawPull:
    """Messages (nats-py's, with .subject, .data, .reply) land in `buf` in stream order."""

    def __init__(self, bus: NatsBus, stream: str, durable: str, filter_subject: str, *, batch: int, expires_s: float,
                 max_bytes: int = 0):
        self.bus, self.stream, self.durable, self.filter_subject = bus, stream, durable, filter_subject
        self.batch, self.expires_s = batch, expires_s
        self.max_bytes = max_bytes           # per pull (0: no cap): the server stops a pull's delivery there
        self.one_big = False                 # the next message is over max_bytes on its own: pull it alone
        self.buf: list = []
        self.arrived = asyncio.Event()       # a message (or a pull's end) came in
        self.pull_done = asyncio.Event()
        self.recreate = asyncio.Event()      # the consumer is lost (or its reader saw a hole): start it again
        self.unanswered = False              # the last pull found no leader for the consumer: check before the next
        self.unanswered_since = 0.0
        self.in_request = self.requested = 0
        self.sub = None

    def buf_bytes(self) -> int:
        return sum(len(m.data) for m in self.buf)

    async def last_seq(self) -> int:
        """The stream's last sequence."""
        return (await self.bus.js.stream_info(self.stream)).state.last_seq

    async def start_at(self, seq: int) -> None:
        """(Re)create the durable consumer to deliver from `seq` on; what `buf` held is dropped."""
        js, nc = self.bus.js, self.bus.nc
        if self.sub:   # forgotten first: a retry after a failed delete (a cluster electing the consumer's leader)
            sub, self.sub = self.sub, None     # must not unsubscribe it twice (BadSubscriptionError, for good)
            await sub.unsubscribe()
        self.buf = []
        try:
            await js.delete_consumer(self.stream, self.durable)
        except NotFoundError:
            pass
        await js.add_consumer(self.stream, api.ConsumerConfig(
            durable_name=self.durable, filter_subject=self.filter_subject, ack_policy=api.AckPolicy.ALL,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=seq,
            max_ack_pending=4 * self.batch, ack_wait=30.0))
        self.inbox = nc.new_inbox()
        self.sub = await nc.subscribe(self.inbox, cb=self._on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        self.recreate.clear()
        self.unanswered = False

    async def _on_msg(self, msg) -> None:
        if not msg.data and msg.headers and "Status" in msg.headers:  # 408 expired, 404 none, 409 ...: the pull is over
            status, desc = msg.headers.get("Status"), msg.headers.get("Description", "")
            if "Exceeds MaxBytes" in desc:     # the pull's byte cap reached; with nothing delivered, one message is
                self.one_big = self.in_request == self.requested      # over it alone: the next pull takes it alone
            elif status == "503" or "Leadership Change" in desc or "Server Shutdown" in desc:
                # No server answers for the consumer (its leader lost, a cluster electing), its leader moved, or the
                # node holding the pull stops (SIGTERM, `stack down` of one node): the consumer is still there.
                # Recreating it here made a new R3 group that was itself electing when the next pull came, so it
                # was recreated again, and the tape stood still for minutes.
                if not self.unanswered:
                    self.unanswered, self.unanswered_since = True, asyncio.get_running_loop().time()
            elif status not in ("404", "408") and "MaxAckPending" not in desc and "Batch Completed" not in desc:
                log.warning("pull ended with %s %s; recreating the consumer", status, desc)
                self.recreate.set()
            self.pull_done.set()
        else:
            self.buf.append(msg)
            self.in_request -= 1
            if self.in_request <= 0:
                self.pull_done.set()
        self.arrived.set()

    async def pull(self, *, no_wait: bool = False) -> None:
        """One request for up to `batch` messages; returns when it is over (served, expired or lost). With
        `no_wait` the server answers at once with what the consumer has pending (a drain)."""
        if self.unanswered and not await self._still_there():
            return
        self.pull_done.clear()
        batch, self.one_big = (1, False) if self.one_big else (self.batch, False)
        self.in_request = self.requested = batch
        request = {"batch": batch, "expires": int(self.expires_s * 1e9), **({"no_wait": True} if no_wait else {}),
                   **({"max_bytes": self.max_bytes} if self.max_bytes and batch > 1 else {})}
        try:
            await self.bus.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.durable}",
                                      json.dumps(request).encode(), reply=self.inbox)
            await asyncio.wait_for(self.pull_done.wait(), self.expires_s + 2.0)
        except asyncio.TimeoutError:
            pass  # the request or its end was lost (reconnect): ask again
        except Exception as e:  # noqa: BLE001 - disconnected: nats-py reconnects; keep asking
            log.warning("pull failed: %r", e)
            await asyncio.sleep(0.2)

    async def _still_there(self) -> bool:
        """After a pull no leader answered: False once the consumer is known to be gone (then `recreate` is set)
        or no one answers yet (the caller pulls again); True when its leader answers again."""
        await asyncio.sleep(UNANSWERED_PAUSE_S)
        try:
            await self.bus.js.consumer_info(self.stream, self.durable, timeout=UNANSWERED_PAUSE_S * 4)
        except NotFoundError:
            log.warning("consumer %s is gone; recreating it", self.durable)
            self.unanswered = False
            self.recreate.set()
            return False
        except Exception as e:  # noqa: BLE001 - still electing (a timeout, no responders): ask again later
            waited = asyncio.get_running_loop().time() - self.unanswered_since
            if waited < UNANSWERED_RECREATE_S:
                log.info("consumer %s has no leader yet (%r)", self.durable, e)
                return False
            log.warning("consumer %s has had no leader for %.0fs (%r); recreating it", self.durable, waited, e)
            self.unanswered = False
            self.recreate.set()
            return False
        self.unanswered = False
        return True

    async def ack(self, msg) -> None:
        """Acknowledge `msg` and everything delivered before it."""
        try:
            await self.bus.nc.publish(msg.reply, b"+ACK")
        except Exception as e:  # noqa: BLE001 - a lost ack only means redelivery, which the reader skips
            log.warning("ack failed: %r", e)
