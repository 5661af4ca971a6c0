"""The learner's one way to the bus: NatsTransport, the Transport of learners/transport/protocol.py over NATS.

This module only wires; the parts live in learners/transport/: the outbox (pushes in order, one not sent yet
taken back for the next; events), the inbox (globals as delivered), the keyframe index and fetch (payloads on demand,
by direct get of their subjects), the final-versions watch, the learner's events (reports) and the background thread
(thread).
It is the only learner module that imports the bus (tests/test_architecture.py checks it).

Three watches feed the inbox and the final watch: the run's keyframes headers only (last per subject: a
joining learner sees the whole model's announcements at once), its deltas, and its CheckpointMarkedFinal. They are
pull consumers the launcher makes when the learner asks (infra/bus/nats_watches.py): a learner's credential creates
none. Durable, they outlive a server restart; one that is gone is asked for again.
A credential the server refuses (tampered, revoked, of an ended run) ends the process with one line and exit status
3 (REFUSED_EXIT): retrying it would never succeed; once the learner's training is done or the run's result is marked
final, that refusal is the run's end revoking its credentials, and the learner leaves with status 0. A credential the
server takes but that is another island's (its own subjects refused for good, learners/transport/denials.py) ends the
process with exit status 4 (DENIED_EXIT).
A lost connection is retried while training goes on.
"""
from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from yeto.infra.bus import Bus, Delivery
from yeto.infra.bus import connect as connect_bus
from yeto.infra.bus.nats_bus import CredentialRefused, NatsBus, redact
from yeto.infra.bus.nats_watches import LearnerWatches
from yeto.infra.bus.perms import granted
from yeto.learners.layout import Layout
from yeto.learners.transport import rendezvous
from yeto.learners.transport.denials import OwnDenials
from yeto.learners.transport.final import FinalWatch
from yeto.learners.transport.inbox import Inbox
from yeto.learners.transport.keyframes import KeyframeIndex, fetch
from yeto.learners.transport.outbox import Outbox
from yeto.learners.transport.protocol import StepReport
from yeto.learners.transport.reports import Reports
from yeto.learners.transport.thread import BusThread
from yeto.schemas.base import Event
from yeto.schemas.fragments import FragmentHeader

REFUSED_EXIT, DENIED_EXIT = 3, 4
BEFORE_EXIT: list[Callable[[int], None]] = []
"""Called with the status just before `refused` leaves the process: a rank forked by the learners' zygote writes its
exit file there (learners/torch/zygote.py), as a spawned rank's shell wrapper does after it ends. Without it the
launcher found no status, read the rank as killed and lost the 3 or 4 that says a retry cannot succeed."""


def refused(message: str, code: int = REFUSED_EXIT) -> NoReturn:
    """Leave the process from the bus thread (the training thread may be anywhere: building the model, a step)."""
    print(f"learner stopped: {message}", file=sys.stderr, flush=True)
    for hook in BEFORE_EXIT:
        try:
            hook(code)
        except Exception as e:  # noqa: BLE001 - leaving all the same
            print(f"before exit: {e!r}", file=sys.stderr, flush=True)
    os._exit(code)


class NatsTransport:
    """The Transport over NATS JetStream. Every method returns at once; the network work runs on a
    background thread, which reconnects with backoff while training goes on."""

    def __init__(self, nats_url: str, *, run_id: str, learner: str, generation: int, progress_every_s: float = 2.0,
                 head_rendezvous: str | None = None):
        self.url, self.run_id, self.learner, self.generation = nats_url, run_id, learner, generation
        self.rendezvous = head_rendezvous       # a cloud run's: the head may move (learners/transport/rendezvous.py)
        self.outbox, self.inbox, self.final, self.keyframes = Outbox(), Inbox(), FinalWatch(), KeyframeIndex()
        self.reports = Reports(run_id=run_id, learner=learner, generation=generation,
                               progress_every_s=progress_every_s, started_at=time.monotonic())
        self._bus: Bus | None = None
        self._ended = False          # end_training ran: the last pushes are queued, what follows is the final evaluation
        self._fetches: set[asyncio.Task[None]] = set()   # running fetch tasks, held so none is collected mid-way
        self.thread = BusThread(f"bus-{learner}", self._main)
        self.thread.start()

    @property
    def bytes_sent(self) -> int:
        return self.outbox.bytes_sent

    @property
    def bytes_fetched(self) -> int:
        return self.inbox.bytes_fetched

    # -- the training thread's side (Transport) ------------------------------------------------------------
    def send_push(self, header: FragmentHeader, payload: bytes) -> None:
        self.outbox.put_push(header, payload)
        self.thread.kick()

    def take_back(self, fragment: int) -> tuple[FragmentHeader, bytes] | None:
        return self.outbox.take_back(fragment)

    def poll_globals(self) -> list[tuple[FragmentHeader, bytes | None]]:
        return self.inbox.take()

    def fetch(self, header: FragmentHeader) -> None:
        self.thread.call(self._want, (header.fragment, header.version))

    def declare_layout(self, layout: Layout) -> None:
        self._publish(self.reports.layout(layout))

    def declare_started(self, how: dict[str, Any]) -> None:
        self._publish(self.reports.started(how))

    def progress(self, result: StepReport) -> None:
        self._publish(self.reports.progress(result, time.monotonic()))

    def final_versions(self) -> dict[int, int] | None:
        return self.final.versions()

    def ack_final(self, versions: dict[int, int]) -> None:
        self._publish(self.reports.final_ack(versions))

    def end_training(self) -> None:
        self._ended = True
        self.inbox.stop()
        self._publish(self.reports.unreported(time.monotonic()))

    def beat(self, step: int, done: int, total: int, *, final: bool) -> None:
        self._publish(self.reports.beat(step, done, total, final=final, now=time.monotonic()))

    def close(self, flush_s: float = 30.0) -> None:
        """Report the last step (the rate limit may have held it back), publish what is queued (bounded wait),
        then disconnect."""
        self._publish(self.reports.unreported(time.monotonic()))
        deadline = time.monotonic() + flush_s
        while self.outbox.pending() and time.monotonic() < deadline and self.thread.alive():
            time.sleep(0.05)
        self.thread.stop()

    def _publish(self, event: Event | None) -> None:
        if event is not None:
            self.outbox.put_event(event)
            self.thread.kick()

    # -- the background thread ------------------------------------------------------------------------------
    async def _main(self) -> None:
        if self.rendezvous:
            self.url = await asyncio.to_thread(rendezvous.start_url, self.rendezvous, self.run_id, self.url)
        try:
            bus = self._bus = await connect_bus(self.url, name=f"learner-{self.learner}-{self.generation}",
                                                connect_timeout=3600)
        except CredentialRefused as e:
            refused(str(e))
        later = asyncio.ensure_future(self._refused_later(bus.refused)) if isinstance(bus, NatsBus) else None
        if isinstance(bus, NatsBus):
            denials = OwnDenials(granted(self.run_id, self.learner))
            bus.on_denied.append(lambda subject: self._denied(denials, subject, bus.num_acked))
        moves = asyncio.ensure_future(rendezvous.follow(bus.nc, self.rendezvous, self.run_id, self.url)) \
            if self.rendezvous and isinstance(bus, NatsBus) else None
        watches = LearnerWatches(bus, self.run_id, self.learner,
                                 {"keyframes": self._on_global, "deltas": self._on_global, "final": self.final.on_marked})
        await watches.start()
        await self.thread.pump(lambda: self.outbox.send_one(bus), self.outbox.pending)
        await watches.close()
        for task in (later, moves):
            if task is not None:
                task.cancel()
        await bus.close()

    async def _refused_later(self, event: asyncio.Event) -> None:
        await event.wait()
        if self._ended or self.final.versions() is not None:
            # The run ended (its result marked, or this learner's training done): its credentials are revoked at the
            # end (services/launcher/effects.py), and a learner still finishing (its final evaluation, a flush) meets
            # that revocation. Its work is the run's already; this is how it ends, not a failure (a joined island's
            # `yeto join` returned 3 here when the finalizer was faster than its final evaluation).
            pushes, events = self.outbox.unsent()
            why = "its training done" if self._ended else "its result marked final"
            refused(f"the run ended while this learner was finishing ({why}): the bus at {redact(self.url)} revoked its "
                    f"credential at the run's end; left unsent: {pushes} push(es), {events} event(s)", 0)
        refused(f"the bus at {redact(self.url)} refused this learner's credential when it reconnected (authorization "
                f"violation): it was revoked, or its run has ended")

    def _denied(self, denials: OwnDenials, subject: str, num_acked: int) -> None:
        if denials.refused(subject, time.monotonic(), num_acked):
            refused(f"the bus at {redact(self.url)} refused this learner's own subjects for {denials.stop_after_s:.0f}s "
                    f"(permissions violation, {denials.count} times, the last on {subject}): the credential in "
                    f"$YETO_NATS_CREDS is not the one issued to {self.learner} of run {self.run_id} (another island's, "
                    f"or a tampered token); give this learner its own", DENIED_EXIT)

    async def _on_global(self, delivery: Delivery) -> None:
        header = self.inbox.add(delivery.headers, delivery.data)
        if header is not None:
            self._start_fetch(header.fragment, self.keyframes.announce(header, delivery.seq))

    def _want(self, key: tuple[int, int]) -> None:
        self._start_fetch(key[0], self.keyframes.want(key))

    def _start_fetch(self, fragment: int, seqs: dict[int, int] | None) -> None:
        if seqs is not None and self._bus is not None:
            task = self.thread.loop.create_task(fetch(self._bus, self.run_id, fragment, seqs, self.inbox.add_fetched))
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)


def connect(*, nats_url: str, run_id: str, learner: str, generation: int,
            head_rendezvous: str | None = None) -> NatsTransport:
    return NatsTransport(nats_url, run_id=run_id, learner=learner, generation=generation,
                         head_rendezvous=head_rendezvous)
