"""The bus protocol's types (what infra/bus/__init__.py re-exports), apart so its implementations import them with no cycle."""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol

from yeto.schemas.base import Command, Message
from yeto.schemas.subjects import LEARNER_EVENTS, command_subject, event_subject, learner_event_subject

Deliver = Literal["all", "last_per_subject", "new"]


class NoResponders(ConnectionError):
    """A request found nobody serving its subject."""


class Delivery(Protocol):
    """One message from a consumer or a watch."""

    subject: str
    data: bytes
    headers: dict[str, str]
    seq: int
    """Its stream sequence."""
    num_pending: int
    """Messages of the consumer not yet delivered after this one."""

    async def ack(self) -> None: ...
    async def nak(self, delay_s: float | None = None) -> None: ...
    async def term(self) -> None: ...
    async def in_progress(self) -> None: ...


class Consumer(Protocol):
    """A pull consumer."""

    async def fetch(self, max_msgs: int, timeout_s: float) -> list[Delivery]:
        """Up to max_msgs deliveries; [] when nothing came within timeout_s (or the server is away)."""
        ...

    async def num_pending(self) -> int:
        """Messages not yet delivered."""
        ...

    async def close(self) -> None: ...


class Subscription(Protocol):
    async def close(self) -> None: ...


class Bus(Protocol):
    name: str

    async def publish(self, msg: Message, *, retry_for: float = 60.0) -> int:
        """Publish an event or command; returns its stream sequence (the original one for a duplicate id)."""
        ...

    async def publish_raw(self, subject: str, payload: bytes, *, msg_id: str | None = None,
                          headers: dict[str, str] | None = None, retry_for: float = 60.0) -> int: ...

    async def consumer(self, subjects: Sequence[str], *, durable: str | None = None, after_seq: int = 0,
                       ack: bool = True, ack_wait_s: float = 60.0, max_deliver: int = -1,
                       max_ack_pending: int = 1000) -> Consumer:
        """A pull consumer on the stream holding `subjects`. durable None: ephemeral (it resumes after its
        last delivery when the server forgets it); ack False: no acks (folds); after_seq N: start at N+1."""
        ...

    async def watch(self, subject: str, callback: Callable[[Delivery], Awaitable[None]], *,
                    deliver: Deliver = "all", headers_only: bool = False) -> Subscription:
        """An ordered push consumer calling `callback` in stream order; it survives a server restart."""
        ...

    async def last(self, subject: str) -> tuple[dict[str, str], bytes] | None:
        """The newest stored message on a subject, None if there is none."""
        ...

    async def direct_get(self, stream: str, seq: int, *, timeout_s: float = 120.0) -> tuple[dict[str, str], bytes] | None:
        """One stored message by sequence; None if the stream no longer holds it."""
        ...

    async def direct_last(self, subject: str, *, timeout_s: float = 120.0) -> tuple[int, dict[str, str], bytes] | None:
        """The newest stored message on `subject` with its stream sequence, None if there is none. Over NATS the
        subject is in the API subject, which the server checks against the caller's grants (a learner's: its run)."""
        ...

    async def request(self, subject: str, payload: bytes, *, timeout_s: float) -> bytes:
        """Request/reply (not persisted). Raises NoResponders, or TimeoutError after timeout_s."""
        ...

    async def serve(self, subject: str, handler: Callable[[bytes], Awaitable[bytes]], *,
                    queue: str = "", concurrency: int = 1) -> Subscription:
        """Answer requests on `subject` with handler(payload); instances sharing `queue` split them. At most
        `concurrency` are answered at once (1: one after another)."""
        ...

    async def close(self) -> None: ...


def subject_of(msg: Message) -> str:
    """Where a message goes: a command to its owner, an event to its run, a learner's own event under its learner
    too (the runner's fold rejects an event that did not come on exactly this subject)."""
    if isinstance(msg, Command):
        assert msg.owner, f"{msg.type} has no owning service"
        return command_subject(msg.owner, msg.type)
    if msg.type in LEARNER_EVENTS:
        return learner_event_subject(msg.run_id, msg.type, getattr(msg, "learner", ""))
    return event_subject(msg.run_id, msg.type)
