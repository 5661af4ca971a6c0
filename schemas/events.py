"""Events of the backbone: service lifecycle and rejected input."""
from __future__ import annotations

from typing import Literal

from yeto.schemas.base import Event, registry


@registry.register
class ServiceStarted(Event):
    type: Literal["ServiceStarted"] = "ServiceStarted"
    version: Literal[1] = 1
    service: str
    instance: str
    pid: int
    host: str


@registry.register
class ServiceStopped(Event):
    type: Literal["ServiceStopped"] = "ServiceStopped"
    version: Literal[1] = 1
    service: str
    instance: str
    reason: str = "signal"


@registry.register
class MessageRejected(Event):
    """A message that can never succeed was terminated; the reason says what to fix."""

    type: Literal["MessageRejected"] = "MessageRejected"
    version: Literal[1] = 1
    subject: str
    stream_seq: int | None = None
    reason: str
    excerpt: str = ""          # the first bytes of the rejected payload, for the human reading the tape
    consumer: str = ""


EXAMPLES = [
    ServiceStarted(id="ex-service-started", service="syncer", instance="syncer-1", pid=4242, host="head", source="syncer"),
    ServiceStopped(id="ex-service-stopped", service="syncer", instance="syncer-1", source="syncer"),
    MessageRejected(id="ex-message-rejected", subject="yeto.cmd.launcher.LaunchRun", stream_seq=7,
                    reason="not valid JSON: Expecting value: line 1 column 1 (char 0)", excerpt="{oops", consumer="launcher"),
]
