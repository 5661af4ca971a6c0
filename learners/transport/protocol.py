"""The `Transport` protocol: everything the step boundary asks of the network, and defaults for one with no bus.

`learners/bus_client.py` implements it over NATS; in-process wires (tests, benchmarks) subclass
`LocalTransport` and write only `send_push` and `poll_globals`. Nothing here may block a training step:
every method queues or reads what is already there and returns.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Protocol

from yeto.learners.layout import Layout
from yeto.schemas.fragments import FragmentHeader


class StepReport(Protocol):
    """One optimizer step as a progress event reports it (learners/step.py's StepResult)."""

    step: int
    loss: float
    tokens: int
    seconds: float
    lr: float


class Transport(Protocol):
    """One learner's link to the syncer and to the run's events."""

    bytes_sent: int
    """Payload bytes of pushes published so far."""
    bytes_fetched: int
    """Payload bytes of keyframes fetched so far."""

    @abstractmethod
    def send_push(self, header: FragmentHeader, payload: bytes) -> None:
        """Queue a push and return; every push queued goes out, in order (one not sent yet may be `take_back`'s)."""

    def take_back(self, fragment: int) -> tuple[FragmentHeader, bytes] | None:
        """A push of `fragment` queued and not on its way yet, removed from the queue (the learner folds its progress
        into the push it makes now); None if none waits."""

    @abstractmethod
    def poll_globals(self) -> list[tuple[FragmentHeader, bytes | None]]:
        """Global chunks arrived since the last poll; None for a keyframe announced without its payload."""

    def fetch(self, header: FragmentHeader) -> None:
        """Ask for an announced keyframe's payload; its chunks come later through `poll_globals`."""

    def declare_layout(self, layout: Layout) -> None:
        """Publish the fragment layout once per generation (on the tape; the finalizer names tensors by it)."""

    def declare_started(self, how: dict[str, Any]) -> None:
        """Publish how this generation runs once (ranks, shard mode, tuning, dtype, ...: a backend's `describe`)."""

    def progress(self, result: StepReport) -> None:
        """Report a step (a transport may batch steps into fewer events, never drop one)."""

    def final_versions(self) -> dict[int, int] | None:
        """The versions the run was finalized at, once it is; None while it trains."""

    def ack_final(self, versions: dict[int, int]) -> None:
        """Tell the finalizer this learner holds `versions` (the finalizer then stops waiting for it)."""

    def end_training(self) -> None:
        """Training is over and the final pushes are queued: report the steps the rate limit still holds, and take no
        more globals (the learner will apply none); events still go out until `close`."""

    def beat(self, step: int, done: int, total: int, *, final: bool) -> None:
        """A held-out evaluation after `step` advanced to `done` of `total` batches (a transport may send fewer beats,
        at most one per report interval): the learner sends nothing else while it evaluates."""

    def close(self) -> None:
        """Send what is queued (bounded wait) and disconnect."""


class LocalTransport(Transport):
    """The honest defaults of a transport with no bus: globals arrive whole, so nothing is fetched; no
    event leaves the process; no run is ever marked final; no bytes are counted."""

    bytes_sent = 0
    bytes_fetched = 0

    def fetch(self, header: FragmentHeader) -> None:
        return None

    def take_back(self, fragment: int) -> tuple[FragmentHeader, bytes] | None:
        return None              # an in-process wire delivers each push as it is sent: none waits

    def declare_layout(self, layout: Layout) -> None:
        return None

    def declare_started(self, how: dict[str, Any]) -> None:
        return None

    def progress(self, result: StepReport) -> None:
        return None

    def final_versions(self) -> dict[int, int] | None:
        return None

    def ack_final(self, versions: dict[int, int]) -> None:
        return None

    def end_training(self) -> None:
        return None

    def beat(self, step: int, done: int, total: int, *, final: bool) -> None:
        return None

    def close(self) -> None:
        return None
