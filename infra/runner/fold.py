"""The runner's fold: events of the service's subjects into its state, one at a time, and the decisions they bring."""
from __future__ import annotations

import asyncio

from yeto.infra.bus import Delivery
from yeto.infra.runner.poison import WrongSubject, check_subject, reject_event
from yeto.infra.runner.snapshot import Snapshots
from yeto.infra.runner.spec import Context
from yeto.schemas.base import Event, SchemaError, parse


async def fold_events(ctx: Context, caught_up: asyncio.Event, snapshots: Snapshots) -> None:
    """An ephemeral consumer without acks over the service's event subjects, after ctx.position (the bus
    resumes it after its last delivery if the server restarts and forgets it)."""
    events = await ctx.bus.consumer(ctx.spec.event_subjects, ack=False, after_seq=ctx.position)
    if await events.num_pending() == 0:
        caught_up.set()
    while not ctx.stop.is_set():
        batch = await events.fetch(500, 1.0)
        for raw in batch:
            await fold_one(ctx, raw, snapshots)
        if batch and not caught_up.is_set() and batch[-1].num_pending == 0:
            caught_up.set()
        await snapshots.maybe_save()


async def fold_one(ctx: Context, raw: Delivery, snapshots: Snapshots) -> None:
    """Fold one event (state and position move together, no await between); poison, or an event on a subject not its
    own (a learner claiming another learner's progress), leaves the state as it was."""
    spec = ctx.spec
    try:
        event = parse(raw.data)
        if isinstance(event, Event):
            check_subject(raw.subject, event)
        state = spec.evolve(ctx.state, event) if isinstance(event, Event) else ctx.state
    except Exception as e:  # noqa: BLE001 - whatever a foreign event does to the fold, the service goes on
        ctx.position = raw.seq
        snapshots.folded()
        stage = "subject" if isinstance(e, WrongSubject) else "parse" if isinstance(e, SchemaError) else "evolve"
        await reject_event(ctx, raw, stage, e)
        return
    ctx.state, ctx.position = state, raw.seq
    snapshots.folded()
    if not (ctx.live and isinstance(event, Event)):
        return
    try:
        intents = spec.decide(ctx.state, event, ctx.clock())
    except Exception as e:  # noqa: BLE001 - a decision this event breaks is not taken; the next event's is
        await reject_event(ctx, raw, "decide", e)
        return
    await ctx.perform(intents)
