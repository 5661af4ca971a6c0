"""The one loop every service runs: parse -> evolve -> decide -> act -> ack.

State is rebuilt on start by folding the event stream (YETO_EVT) from its first message, not the
tape: the stream is the source of truth, the tape belongs to the tape writer alone (one DuckDB
writer) and may lag. Decisions are level-triggered: after the replay, and on every tick, `decide`
sees the whole state, so a decision lost to a crash is taken again; its messages carry ids derived
from their cause, so taking it twice publishes once.

Rule for scaling (N instances of a service): events reach every instance (each folds its own state),
commands reach exactly one (a shared durable work-queue consumer). So the reaction to an event must
be publishing only; effects that are not idempotent (starting a process, writing a file) happen in
a command's handler.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from yeto.infra.bus import Bus
from yeto.infra.natsserver import ensure_streams
from yeto.schemas.base import Command, Event, Message, SchemaError, parse
from yeto.schemas.events import MessageRejected, ServiceStarted, ServiceStopped
from yeto.schemas.subjects import CMD_PREFIX, EVT_PREFIX

log = logging.getLogger(__name__)


class Retry(Exception):
    """Raised by an effect that may succeed later: the message is nak'ed with a delay."""

    def __init__(self, reason: str, delay_s: float = 2.0):
        super().__init__(reason)
        self.delay_s = delay_s


@dataclass(frozen=True)
class Publish:
    """The intent every service shares: publish a message (its id already derived from its cause)."""

    msg: Message


Decide = Callable[[Any, Message | None, datetime], list[Any]]


@dataclass(kw_only=True)
class ServiceSpec:
    name: str
    """Service name; also its command consumer's durable name and its command subject token."""
    initial: Callable[[], Any] = lambda: None
    """A fresh state."""
    evolve: Callable[[Any, Event], Any] = lambda state, event: state
    """Pure fold of one event into the state."""
    decide: Decide = lambda state, msg, now: []
    """Pure: (state, the command or event just seen or None on a tick, now) -> intents."""
    act: Callable[[Any, "Context"], Awaitable[list[Message]]] | None = None
    """Performs a non-Publish intent; returns messages to publish. Raise Retry to try again later."""
    event_subjects: tuple[str, ...] = (f"{EVT_PREFIX}.>",)
    """Which events this service folds (JetStream filter subjects)."""
    tick_s: float | None = None
    """Call decide(state, None, now) this often (time-based decisions, e.g. budget cutoff)."""
    background: tuple[Callable[["Context"], Awaitable[None]], ...] = ()
    """Extra long-lived tasks (the syncer's data plane), cancelled at shutdown."""
    handles_commands: bool = True


@dataclass
class Context:
    spec: ServiceSpec
    bus: Bus
    instance: str
    state: Any = None
    live: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)

    async def perform(self, intents: list[Any]) -> None:
        for intent in intents:
            out = [intent.msg] if isinstance(intent, Publish) else await self.spec.act(intent, self)
            for msg in out:
                await self.bus.publish(msg)


async def _reject(ctx: Context, raw, reason: str) -> None:
    meta = raw.metadata
    await ctx.bus.publish(MessageRejected(
        id=f"rejected-{meta.stream}-{meta.sequence.stream}", source=ctx.instance, subject=raw.subject,
        stream_seq=meta.sequence.stream, reason=reason, excerpt=raw.data[:200].decode("utf-8", "replace"),
        consumer=ctx.spec.name))
    await raw.term()


async def _event_consumer(ctx: Context, after_seq: int):
    """An ephemeral pull consumer over the service's event subjects, from `after_seq` + 1."""
    policy = dict(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1) if after_seq \
        else dict(deliver_policy=DeliverPolicy.ALL)
    return await ctx.bus.js.pull_subscribe("", stream="YETO_EVT", config=ConsumerConfig(
        filter_subjects=list(ctx.spec.event_subjects), ack_policy=AckPolicy.NONE, inactive_threshold=120,
        mem_storage=True, **policy))


async def _fold_events(ctx: Context, caught_up: asyncio.Event) -> None:
    spec, last_seq = ctx.spec, 0
    sub = await _event_consumer(ctx, last_seq)
    if (await sub.consumer_info()).num_pending == 0:
        caught_up.set()
    while not ctx.stop.is_set():
        try:
            batch = await sub.fetch(500, timeout=1.0)
        except asyncio.TimeoutError:
            continue
        except Exception as e:  # noqa: BLE001 - the server restarted and forgot the consumer: resume after last_seq
            log.info("%s: event consumer lost (%r); resuming after seq %d", spec.name, e, last_seq)
            await asyncio.sleep(0.5)
            try:
                sub = await _event_consumer(ctx, last_seq)
            except Exception:  # noqa: BLE001 - still reconnecting
                pass
            continue
        for raw in batch:
            last_seq = raw.metadata.sequence.stream
            try:
                event = parse(raw.data)
            except SchemaError as e:  # the tape keeps it; a fold cannot use it
                log.warning("%s: skipping unparsable event seq %s: %s", spec.name, last_seq, e)
                continue
            if isinstance(event, Event):
                ctx.state = spec.evolve(ctx.state, event)
                if ctx.live:
                    await ctx.perform(spec.decide(ctx.state, event, ctx.clock()))
        if batch and not caught_up.is_set() and batch[-1].metadata.num_pending == 0:
            caught_up.set()


async def _handle_commands(ctx: Context) -> None:
    spec = ctx.spec
    sub = await ctx.bus.js.pull_subscribe(f"{CMD_PREFIX}.{spec.name}.>", durable=spec.name,
                                          config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=60, max_deliver=20))
    while not ctx.stop.is_set():
        try:
            batch = await sub.fetch(16, timeout=1.0)
        except asyncio.TimeoutError:
            continue
        except Exception as e:  # noqa: BLE001 - a reconnect in progress; fetch again
            log.debug("fetch: %r", e)
            await asyncio.sleep(0.2)
            continue
        for raw in batch:
            try:
                cmd = parse(raw.data)
                if not isinstance(cmd, Command) or cmd.owner != spec.name:
                    raise SchemaError(f"{cmd.type} is not a command for {spec.name}")
            except SchemaError as e:
                await _reject(ctx, raw, e.reason)
                continue
            try:
                await ctx.perform(spec.decide(ctx.state, cmd, ctx.clock()))
            except Retry as e:
                log.info("%s: retry %s in %.1fs: %s", spec.name, cmd.type, e.delay_s, e)
                await raw.nak(delay=e.delay_s)
                continue
            except Exception:
                log.exception("%s: %s failed; it will be redelivered", spec.name, cmd.type)
                await raw.nak(delay=2.0)
                continue
            await raw.ack()


async def _tick(ctx: Context) -> None:
    while not ctx.stop.is_set():
        try:
            await asyncio.wait_for(ctx.stop.wait(), ctx.spec.tick_s)
        except asyncio.TimeoutError:
            await ctx.perform(ctx.spec.decide(ctx.state, None, ctx.clock()))


async def run_service(spec: ServiceSpec, url: str, *, instance: str | None = None,
                      stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or ctx.stop), then publish ServiceStopped and drain."""
    instance = instance or f"{spec.name}-{socket.gethostname()}-{os.getpid()}"
    async with AsyncExitStack() as stack:
        bus = await Bus.connect(url, name=instance)
        stack.push_async_callback(bus.close)
        await ensure_streams(bus.js)
        ctx = Context(spec=spec, bus=bus, instance=instance, state=spec.initial())
        if stop is None:  # a process of its own: signals stop it; embedded (tests) callers pass their own event
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, ctx.stop.set)
        else:
            ctx.stop = stop
        await bus.publish(ServiceStarted(service=spec.name, instance=instance, pid=os.getpid(),
                                         host=socket.gethostname(), source=instance))
        caught_up = asyncio.Event()
        tasks = [asyncio.create_task(_fold_events(ctx, caught_up))]
        await caught_up.wait()
        ctx.live = True
        await ctx.perform(spec.decide(ctx.state, None, ctx.clock()))  # reconcile after the replay
        if spec.handles_commands:
            tasks.append(asyncio.create_task(_handle_commands(ctx)))
        if spec.tick_s:
            tasks.append(asyncio.create_task(_tick(ctx)))
        tasks += [asyncio.create_task(job(ctx)) for job in spec.background]
        stopper = asyncio.create_task(ctx.stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for t in done:
            if t is not stopper and t.exception():
                raise t.exception()
        await bus.publish(ServiceStopped(service=spec.name, instance=instance, source=instance), retry_for=5)
