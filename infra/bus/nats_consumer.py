"""JetStream consumers behind the bus protocol: pull consumers that outlive a server restart, ordered watches."""
from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from yeto.infra.bus.types import Delivery
from yeto.schemas.subjects import stream_for

log = logging.getLogger(__name__)
POLICIES = {"all": DeliverPolicy.ALL, "last_per_subject": DeliverPolicy.LAST_PER_SUBJECT, "new": DeliverPolicy.NEW}


class NatsDelivery:
    __slots__ = ("subject", "data", "headers", "seq", "num_pending", "_msg", "_acks")

    def __init__(self, msg, acks: bool):
        meta = msg.metadata
        self.subject, self.data, self.headers = msg.subject, msg.data or b"", dict(msg.headers or {})
        self.seq, self.num_pending = meta.sequence.stream, meta.num_pending
        self._msg, self._acks = msg, acks

    async def ack(self) -> None:
        if self._acks:  # a consumer without acks (a fold, a watch) has nothing to acknowledge
            await self._msg.ack()

    async def nak(self, delay_s: float | None = None) -> None:
        if self._acks:
            await self._msg.nak(delay=delay_s)

    async def term(self) -> None:
        if self._acks:
            await self._msg.term()

    async def in_progress(self) -> None:
        if self._acks:
            await self._msg.in_progress()


class NatsSubscription:
    def __init__(self, sub):
        self.sub = sub

    async def close(self) -> None:
        try:
            await self.sub.unsubscribe()
        except Exception as e:  # noqa: BLE001 - the connection is closing already
            log.debug("unsubscribe: %r", e)


class NatsConsumer:
    """A pull consumer. On a failed fetch (server restart, consumer forgotten) it binds again; an ephemeral
    one is re-created after its last delivery (ephemerals live in server memory and die with it)."""

    def __init__(self, js, stream: str, subjects: tuple[str, ...], *, durable: str | None, after_seq: int, ack: bool,
                 ack_wait_s: float, max_deliver: int, max_ack_pending: int):
        self.js, self.stream, self.subjects, self.durable, self.ack = js, stream, subjects, durable, ack
        self.after_seq, self.last_seq = after_seq, after_seq
        self.ack_wait_s, self.max_deliver, self.max_ack_pending = ack_wait_s, max_deliver, max_ack_pending
        self.sub: Any = None

    async def open(self) -> None:
        start = self.last_seq if self.durable is None else self.after_seq
        many, ephemeral, acks = len(self.subjects) > 1, self.durable is None, self.ack
        config = ConsumerConfig(
            ack_policy=AckPolicy.EXPLICIT if acks else AckPolicy.NONE, filter_subjects=list(self.subjects) if many else None,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start else DeliverPolicy.ALL,
            opt_start_seq=start + 1 if start else None, ack_wait=self.ack_wait_s if acks else None,
            max_deliver=self.max_deliver if acks else None, max_ack_pending=self.max_ack_pending if acks else None,
            inactive_threshold=120 if ephemeral else None, mem_storage=True if ephemeral else None)
        old, self.sub = self.sub, await self.js.pull_subscribe("" if many else self.subjects[0], durable=self.durable,
                                                               stream=self.stream, config=config)
        if old is not None:
            await NatsSubscription(old).close()

    async def fetch(self, max_msgs: int, timeout_s: float) -> list[Delivery]:
        try:
            msgs = await self.sub.fetch(max_msgs, timeout=timeout_s)
        except asyncio.TimeoutError:
            return []
        except Exception as e:  # noqa: BLE001 - the server restarted or is away: bind again, deliver nothing now
            log.info("consumer on %s lost (%r); resuming after seq %d", self.subjects, e, self.last_seq)
            await asyncio.sleep(min(0.5, timeout_s))
            try:
                await self.open()
            except Exception as e2:  # noqa: BLE001 - still reconnecting: the next fetch tries again
                log.debug("reopen: %r", e2)
            return []
        out: list[Delivery] = [NatsDelivery(m, self.ack) for m in msgs]
        if out:
            self.last_seq = out[-1].seq
        return out

    async def num_pending(self) -> int:
        return (await self.sub.consumer_info()).num_pending

    async def close(self) -> None:
        await NatsSubscription(self.sub).close()
        if self.durable is None:  # an ephemeral is of no use to anyone else: do not leave it to expire
            try:
                await self.js.delete_consumer(self.stream, (await self.sub.consumer_info()).name)
            except Exception as e:  # noqa: BLE001 - gone already, or the connection is closing
                log.debug("delete consumer: %r", e)


async def watch(js, subject: str, callback: Callable[[Delivery], Awaitable[None]], *, deliver: str = "all",
                headers_only: bool = False) -> NatsSubscription:
    """An ordered push consumer. Ordered consumers live in server memory: after a restart nats-py re-creates
    one once two idle heartbeats are missed, so the heartbeat is 1 s (the 5 s default leaves followers,
    and learners waiting for new globals, 10 s behind)."""
    async def on_msg(msg) -> None:
        await callback(NatsDelivery(msg, acks=False))

    # Named, so the create request's API subject carries the filter, which the server checks against the request.
    sub = await js.subscribe(subject, stream=stream_for(subject).name, ordered_consumer=True,
                             config=ConsumerConfig(name=_watch_name()), idle_heartbeat=1.0,
                             deliver_policy=POLICIES[deliver], headers_only=headers_only or None, cb=on_msg)
    _fresh_name_on_reset(sub)
    return NatsSubscription(sub)


def _watch_name() -> str:
    return f"watch-{secrets.token_hex(8)}"


def _fresh_name_on_reset(sub) -> None:
    """nats-py re-creates an ordered consumer (missed heartbeats, a gap) with the same config. Under the same
    name, while the server still holds the old one (a stall, not a restart), the create is refused and the
    watch goes silent until the old one expires; another name each time does not collide.
    Not while disconnected: its heartbeat check resets every two missed heartbeats, and a create made then goes
    out when the client reaches a server whose version it does not know yet (a head that moved: a new server
    pool entry), so nats-py takes the nameless legacy subject, which a credential allowed only named creates is
    refused (Publish Violation, and the watch silent for good). The first check once connected re-creates it by name."""
    jsi = getattr(getattr(sub, "_sub", None), "_jsi", None)
    if jsi is None or not hasattr(jsi, "reset_ordered_consumer"):
        return
    reset, nc = jsi.reset_ordered_consumer, getattr(jsi, "_conn", None)

    async def reset_with_fresh_name(sseq):
        if nc is not None and not nc.is_connected:
            return False
        jsi._ccreq.name = _watch_name()
        return await reset(sseq)

    jsi.reset_ordered_consumer = reset_with_fresh_name
