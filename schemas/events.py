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
class ComponentRestarted(Event):
    """The stack's watchdog (infra/stack/watchdog.py) found a component dead without a stop and started it again, or,
    after too many restarts in its window, did not (`gave_up`: `yeto stack up` starts it once its cause is fixed)."""

    type: Literal["ComponentRestarted"] = "ComponentRestarted"
    version: Literal[1] = 1
    component: str
    pid: int = 0               # the new process; 0 when it was not started again
    restarts: int              # restarts of this component within the watchdog's window (10 minutes)
    down_s: float = 0.0        # from the watchdog's first sight of it dead to its start again
    gave_up: bool = False
    log_tail: str = ""         # the last line of its log, printable, 240 characters at most
    host: str = ""


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
    ComponentRestarted(id="ex-component-restarted", component="finalizer", pid=4343, restarts=1, down_s=1.02,
                       log_tail="MemoryError", host="head", source="watchdog"),
    MessageRejected(id="ex-message-rejected", subject="yeto.cmd.launcher.LaunchRun", stream_seq=7,
                    reason="not valid JSON: Expecting value: line 1 column 1 (char 0)", excerpt="{oops", consumer="launcher"),
]
