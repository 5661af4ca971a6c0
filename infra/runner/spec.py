"""What a service is made of (ServiceSpec, StateCodec, the Publish intent, Retry, Reject) and its running Context."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from yeto.infra.bus.types import Bus
from yeto.schemas.base import Event, Message
from yeto.schemas.subjects import EVERY_EVENT


class Retry(Exception):
    """Raised by an effect that may succeed later: the message is nak'ed with a delay."""

    def __init__(self, reason: str, delay_s: float = 2.0):
        super().__init__(reason)
        self.delay_s = delay_s


class Reject(Exception):
    """Raised by `decide` for a message that can never succeed: it is rejected (MessageRejected) with this reason."""


@dataclass(frozen=True)
class Publish:
    """The intent every service shares: publish a message (its id already derived from its cause)."""

    msg: Message


@dataclass(frozen=True)
class StateCodec:
    """How a service's folded state is stored in its snapshot. JSON, never pickle: the bus is untrusted."""

    version: str
    """The state's shape (schemas/shape.py's `shape_version(State)`): a snapshot of another version is ignored
    (full replay)."""
    dump: Callable[[Any], bytes]
    """The whole folded state -> bytes; `load(dump(s)) == s`."""
    load: Callable[[bytes], Any]


Decide = Callable[[Any, Message | None, datetime], list[Any]]


@dataclass(kw_only=True)
class ServiceSpec:
    name: str
    """Service name; also its command consumer's durable name, its command subject token and its snapshot's."""
    initial: Callable[[], Any] = lambda: None
    """A fresh state."""
    evolve: Callable[[Any, Event], Any] = lambda state, event: state
    """Pure fold of one event into the state; if it raises, the event is rejected and the state stays as it was."""
    decide: Decide = lambda state, msg, now: []
    """Pure: (state, the command or event just seen or None on a tick, now) -> intents. Raising (Reject or any
    error but Retry) rejects the message; on a tick it is logged and the service goes on."""
    act: Callable[[Any, Context], Awaitable[list[Message]]] | None = None
    """Performs a non-Publish intent; returns messages to publish. Raise Retry to try again later."""
    event_subjects: tuple[str, ...] = (EVERY_EVENT,)
    """Which events this service folds (filter subjects on YETO_EVT)."""
    tick_s: float | None = None
    """Call decide(state, None, now) this often (time-based decisions, e.g. budget cutoff)."""
    background: tuple[Callable[[Context], Coroutine[Any, Any, None]], ...] = ()
    """Extra long-lived tasks (the syncer's data plane), cancelled at shutdown."""
    handles_commands: bool = True
    codec: StateCodec | None = None
    """With a codec the state is snapshotted and a start resumes from the snapshot (see runner/snapshot.py)."""
    snapshot_every: int = 1000
    """Snapshot after this many folded events ..."""
    snapshot_s: float = 60.0
    """... or this many seconds after the first event not in the last snapshot, and at a clean stop."""


@dataclass
class Context:
    spec: ServiceSpec
    bus: Bus
    instance: str
    state: Any = None
    position: int = 0
    """The YETO_EVT sequence `state` is folded to."""
    live: bool = False
    tick_error: str = ""
    """The last error of decide on a tick (logged once until it changes)."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)

    async def perform(self, intents: list[Any]) -> None:
        """The one door out of a service: a Publish is published, any other intent goes to `act`."""
        for intent in intents:
            if isinstance(intent, Publish):
                out = [intent.msg]
            else:
                assert self.spec.act, f"{self.spec.name} decided {intent!r} but has no act"
                out = await self.spec.act(intent, self)
            for msg in out:
                await self.bus.publish(msg)
