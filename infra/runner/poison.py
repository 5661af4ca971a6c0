"""Poison in the runner: a message that makes parse, `evolve` or `decide` raise, or an event on a subject not its own,
is rejected with an event and skipped."""
from __future__ import annotations

import logging

from yeto.infra.bus import Delivery, subject_of
from yeto.infra.runner.spec import Context, Reject
from yeto.schemas.base import Event, SchemaError
from yeto.schemas.events import MessageRejected
from yeto.schemas.subjects import stream_for

log = logging.getLogger(__name__)
MAX_REASON = 500


class WrongSubject(SchemaError):
    """An event whose payload claims what its subject does not say (the server checked the subject, not the payload)."""


def check_subject(subject: str, event: Event) -> None:
    """An event is believed only on its own subject (subject_of): the run and type, and for a learner's own event the
    learner, that the publisher's credential was allowed to use. An island claiming another island's progress or
    final ack, or putting another type of event on its progress subject, fails here."""
    if subject != (want := subject_of(event)):
        raise WrongSubject(_bounded(f"the payload belongs on {want}, not on {subject}: it claims what its sender may not say"))


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."


def reason_of(error: BaseException) -> str:
    """What the rejection says: a Reject's own words, else the exception's type and message (bounded)."""
    return _bounded(str(error) if isinstance(error, Reject) else f"{type(error).__name__}: {error}")


async def publish_rejection(ctx: Context, raw: Delivery, reason: str) -> None:
    """One MessageRejected per (service, stream, seq): instances of a service publish it once (its id is derived)."""
    stream = stream_for(raw.subject).name
    await ctx.bus.publish(MessageRejected(
        id=f"rejected-{ctx.spec.name}-{stream}-{raw.seq}", source=ctx.instance, subject=raw.subject, stream_seq=raw.seq,
        reason=reason, excerpt=raw.data[:200].decode("utf-8", "replace"), consumer=ctx.spec.name))


async def reject_command(ctx: Context, raw: Delivery, reason: str) -> None:
    """A command that can never succeed: on the tape as MessageRejected, and terminated (never redelivered)."""
    log.warning("%s: rejected command %s seq %s: %s", ctx.spec.name, raw.subject, raw.seq, reason)
    await publish_rejection(ctx, raw, reason)
    await raw.term()


async def reject_event(ctx: Context, raw: Delivery, stage: str, error: BaseException) -> None:
    """An event the fold cannot take: the state stays as it was. Published once live; a replay only logs it (it was
    rejected when it was first seen, and a restart must not repeat that on the tape)."""
    reason = f"{stage}: {error.reason if isinstance(error, SchemaError) else reason_of(error)}"
    log.warning("%s: skipping event %s seq %s: %s", ctx.spec.name, raw.subject, raw.seq, reason)
    if ctx.live:
        await publish_rejection(ctx, raw, reason)
