"""The one loop every service runs: parse -> evolve -> decide -> act -> ack.

State is rebuilt on start by folding the event stream (YETO_EVT), not the tape: the stream is the
source of truth, the tape belongs to the tape writer alone (one DuckDB writer) and may lag. A service
with a `StateCodec` resumes from its latest snapshot (its state with the stream position it was folded
to, runner/snapshot.py) and folds only what came after; without one, or when the snapshot does not
load, it folds from sequence 1. Decisions are level-triggered: after the fold, and on every tick,
`decide` sees the whole state, so a decision lost to a crash is taken again; its messages carry ids
derived from their cause, so taking it twice publishes once.

Poison (runner/poison.py): an event that makes parse or `evolve` raise is skipped with the state as it was, a
command or event that makes `decide` raise is rejected; both go on the tape as MessageRejected. A loop that
dies (the fold, the command loop, a background task) ends the service with its error: a non-zero exit,
never a service that looks up and does nothing.

Rule for scaling (N instances of a service): events reach every instance (each folds its own state),
commands reach exactly one (a shared durable work-queue consumer). So the reaction to an event must
be publishing only; effects that are not idempotent (starting a process, writing a file) happen in
a command's handler. What a service is made of is in runner/spec.py, the loops in runner/loops.py and runner/fold.py.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
from contextlib import AsyncExitStack

from yeto.infra.bus import Bus, connect
from yeto.infra.nats.server import ensure_streams
from yeto.infra.runner.loops import serve
from yeto.infra.runner.spec import Context, Decide, Publish, Reject, Retry, ServiceSpec, StateCodec

__all__ = ["Context", "Decide", "Publish", "Reject", "Retry", "ServiceSpec", "StateCodec", "run_service"]


async def run_service(spec: ServiceSpec, bus_or_url: Bus | str, *, instance: str | None = None,
                      stop: asyncio.Event | None = None, ready: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or `stop`), then snapshot and publish ServiceStopped. `bus_or_url`: a NATS
    URL to connect to (and close at the end), or a bus the caller owns (a MemoryBus in pure tests). `ready` is set
    once the fold caught up and the command consumer exists (tests wait on it)."""
    instance = instance or f"{spec.name}-{socket.gethostname()}-{os.getpid()}"
    async with AsyncExitStack() as stack:
        if isinstance(bus_or_url, str):
            bus = await connect(bus_or_url, name=instance)
            stack.push_async_callback(bus.close)
            await ensure_streams(bus)
        else:
            bus = bus_or_url
        ctx = Context(spec=spec, bus=bus, instance=instance, state=spec.initial())
        if stop is None:  # a process of its own: signals stop it; embedded (tests) callers pass their own event
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, ctx.stop.set)
        else:
            ctx.stop = stop
        await serve(ctx, ready or asyncio.Event())
