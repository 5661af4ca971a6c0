"""The runner's loops: fold events into the state, handle commands, tick; and a service's life from start to stop."""
from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

from yeto.infra.bus import Delivery
from yeto.infra.runner_snapshot import Snapshots
from yeto.infra.service_spec import Context, Retry
from yeto.schemas.base import Command, Event, SchemaError, parse
from yeto.schemas.events import MessageRejected, ServiceStarted, ServiceStopped
from yeto.schemas.subjects import service_commands, stream_for

log = logging.getLogger(__name__)


async def serve(ctx: Context, ready: asyncio.Event) -> None:
    spec, bus = ctx.spec, ctx.bus
    await bus.publish(ServiceStarted(service=spec.name, instance=ctx.instance, pid=os.getpid(),
                                     host=socket.gethostname(), source=ctx.instance))
    snapshots = Snapshots(ctx)
    await snapshots.restore()
    caught_up = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = [asyncio.create_task(fold_events(ctx, caught_up, snapshots))]
    await caught_up.wait()
    ctx.live = True
    await ctx.perform(spec.decide(ctx.state, None, ctx.clock()))  # reconcile after the fold
    if spec.handles_commands:
        commands = await bus.consumer([service_commands(spec.name)], durable=spec.name, ack_wait_s=60, max_deliver=20)
        tasks.append(asyncio.create_task(handle_commands(ctx, commands)))
    if spec.tick_s:
        tasks.append(asyncio.create_task(tick(ctx)))
    tasks += [asyncio.create_task(job(ctx)) for job in spec.background]
    ready.set()
    stopper = asyncio.create_task(ctx.stop.wait())
    done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for t in done:
        if t is not stopper and (error := t.exception()) is not None:
            raise error
    await snapshots.save()
    await bus.publish(ServiceStopped(service=spec.name, instance=ctx.instance, source=ctx.instance), retry_for=5)


async def fold_events(ctx: Context, caught_up: asyncio.Event, snapshots: Snapshots) -> None:
    """An ephemeral consumer without acks over the service's event subjects, after ctx.position (the bus
    resumes it after its last delivery if the server restarts and forgets it)."""
    spec = ctx.spec
    events = await ctx.bus.consumer(spec.event_subjects, ack=False, after_seq=ctx.position)
    if await events.num_pending() == 0:
        caught_up.set()
    while not ctx.stop.is_set():
        batch = await events.fetch(500, 1.0)
        for raw in batch:
            try:
                event = parse(raw.data)
            except SchemaError as e:  # the tape keeps it; a fold cannot use it
                log.warning("%s: skipping unparsable event seq %s: %s", spec.name, raw.seq, e)
                ctx.position = raw.seq
                continue
            if isinstance(event, Event):
                ctx.state = spec.evolve(ctx.state, event)
            ctx.position = raw.seq        # no await since the fold: state and position move together
            snapshots.folded()
            if ctx.live and isinstance(event, Event):
                await ctx.perform(spec.decide(ctx.state, event, ctx.clock()))
        if batch and not caught_up.is_set() and batch[-1].num_pending == 0:
            caught_up.set()
        await snapshots.maybe_save()


async def reject(ctx: Context, raw: Delivery, reason: str) -> None:
    await ctx.bus.publish(MessageRejected(
        id=f"rejected-{stream_for(raw.subject).name}-{raw.seq}", source=ctx.instance, subject=raw.subject,
        stream_seq=raw.seq, reason=reason, excerpt=raw.data[:200].decode("utf-8", "replace"), consumer=ctx.spec.name))
    await raw.term()


async def handle_commands(ctx: Context, commands) -> None:
    spec = ctx.spec
    while not ctx.stop.is_set():
        for raw in await commands.fetch(16, 1.0):
            try:
                cmd = parse(raw.data)
                if not isinstance(cmd, Command) or cmd.owner != spec.name:
                    raise SchemaError(f"{cmd.type} is not a command for {spec.name}")
            except SchemaError as e:
                await reject(ctx, raw, e.reason)
                continue
            try:
                await ctx.perform(spec.decide(ctx.state, cmd, ctx.clock()))
            except Retry as e:
                log.info("%s: retry %s in %.1fs: %s", spec.name, cmd.type, e.delay_s, e)
                await raw.nak(delay_s=e.delay_s)
                continue
            except Exception:
                log.exception("%s: %s failed; it will be redelivered", spec.name, cmd.type)
                await raw.nak(delay_s=2.0)
                continue
            await raw.ack()


async def tick(ctx: Context) -> None:
    while not ctx.stop.is_set():
        try:
            await asyncio.wait_for(ctx.stop.wait(), ctx.spec.tick_s)
        except asyncio.TimeoutError:
            await ctx.perform(ctx.spec.decide(ctx.state, None, ctx.clock()))
