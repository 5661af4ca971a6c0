"""The runner's loops: fold events into the state, handle commands, tick; and a service's life from start to stop."""
from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

from yeto.infra.runner.fold import fold_events
from yeto.infra.runner.poison import reason_of, reject_command
from yeto.infra.runner.snapshot import Snapshots
from yeto.infra.runner.spec import Context, Retry
from yeto.schemas.base import Command, SchemaError, parse
from yeto.schemas.events import ServiceStarted, ServiceStopped
from yeto.schemas.subjects import service_commands

log = logging.getLogger(__name__)


async def serve(ctx: Context, ready: asyncio.Event) -> None:
    spec, bus = ctx.spec, ctx.bus
    await bus.publish(ServiceStarted(service=spec.name, instance=ctx.instance, pid=os.getpid(),
                                     host=socket.gethostname(), source=ctx.instance))
    snapshots = Snapshots(ctx)
    await snapshots.restore()
    caught_up = asyncio.Event()
    fold = asyncio.create_task(fold_events(ctx, caught_up, snapshots))
    tasks: list[asyncio.Task[Any]] = [fold]
    waiter = asyncio.create_task(caught_up.wait())
    await asyncio.wait([waiter, fold], return_when=asyncio.FIRST_COMPLETED)
    if not caught_up.is_set():     # the fold ended before catching up: its error, or a stop during the replay
        waiter.cancel()
        _raise_if_failed(ctx, fold)
        return
    ctx.live = True
    await decide_on_tick(ctx)      # reconcile after the fold
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
    for t in done - {stopper}:
        _raise_if_failed(ctx, t)
    await snapshots.save()
    await bus.publish(ServiceStopped(service=spec.name, instance=ctx.instance, source=ctx.instance), retry_for=5)


def _raise_if_failed(ctx: Context, task: asyncio.Task) -> None:
    """A loop that ended: its error, or one saying it ended though the service was not stopped."""
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error
    if not ctx.stop.is_set():
        raise RuntimeError(f"{ctx.spec.name}: a loop of the service ended on its own; stopping the service")


async def handle_commands(ctx: Context, commands) -> None:
    spec = ctx.spec
    while not ctx.stop.is_set():
        for raw in await commands.fetch(16, 1.0):
            try:
                cmd = parse(raw.data)
                if not isinstance(cmd, Command) or cmd.owner != spec.name:
                    raise SchemaError(f"{cmd.type} is not a command for {spec.name}")
                intents = spec.decide(ctx.state, cmd, ctx.clock())
            except Retry as e:
                log.info("%s: retry %s in %.1fs: %s", spec.name, raw.subject, e.delay_s, e)
                await raw.nak(delay_s=e.delay_s)
                continue
            except SchemaError as e:
                await reject_command(ctx, raw, e.reason)
                continue
            except Exception as e:  # noqa: BLE001 - decide is pure: what it refuses now it refuses on every delivery
                await reject_command(ctx, raw, reason_of(e))
                continue
            try:
                await ctx.perform(intents)
            except Retry as e:
                log.info("%s: retry %s in %.1fs: %s", spec.name, cmd.type, e.delay_s, e)
                await raw.nak(delay_s=e.delay_s)
                continue
            except Exception:
                log.exception("%s: %s failed; it will be redelivered", spec.name, cmd.type)
                await raw.nak(delay_s=2.0)
                continue
            await raw.ack()


async def decide_on_tick(ctx: Context) -> None:
    """decide(state, None, now) and its intents; a decide that raises is logged (once per error) and skipped, so
    commands (`yeto down`) are still handled."""
    try:
        intents = ctx.spec.decide(ctx.state, None, ctx.clock())
    except Exception as e:  # one bad run's state must not stop the service's other work
        if (reason := reason_of(e)) != ctx.tick_error:
            log.exception("%s: decide on a tick failed: %s", ctx.spec.name, reason)
        ctx.tick_error = reason
        return
    ctx.tick_error = ""
    await ctx.perform(intents)


async def tick(ctx: Context) -> None:
    while not ctx.stop.is_set():
        try:
            await asyncio.wait_for(ctx.stop.wait(), ctx.spec.tick_s)
        except asyncio.TimeoutError:
            await decide_on_tick(ctx)
