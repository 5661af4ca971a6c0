"""Is the tape current? The tape writer's position against the event stream's, so no reader serves stale data silently.

`stack up` waits for the writer to answer and reports a component that died; `stack status` and `yeto status` print
the tape's line when the writer does not answer or is behind (docs/TAPE.md, "Health").
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from yeto.infra.bus import connect
from yeto.schemas.subjects import EVT_STREAM

EXITED = "its process exited"
BEHIND = 1000        # events the tape may trail the stream by before a reader is told (a busy writer's batch or two)


@dataclass(frozen=True)
class TapeHealth:
    answers: bool
    tape_seq: int = 0
    stream_seq: int = 0
    error: str = ""

    @property
    def behind(self) -> int:
        return max(0, self.stream_seq - self.tape_seq)

    def line(self) -> str | None:
        """None when current, else what a reader must know about the data it is shown."""
        if not self.answers:
            return (f"the tape writer does not answer ({self.error}): the tape stops at its last commit and newer events "
                    "are missing; `yeto stack status` shows it, `yeto stack up` restarts it (its log: <state>/logs/tape.log)")
        if self.behind > BEHIND:
            return (f"the tape is {self.behind} events behind the event stream (tape at seq {self.tape_seq}, stream at "
                    f"{self.stream_seq}): what it shows is stale until the writer catches up")
        return None


async def tape_health(url: str, *, wait_s: float = 0.0, timeout_s: float = 5.0,
                      exited: Callable[[], bool] = lambda: False) -> TapeHealth:
    """The writer's position and the stream's; `wait_s`: how long to wait for a writer that is starting to answer,
    unless `exited()` says its process is gone (a writer that died at its start is told at once, not after wait_s)."""
    from yeto.infra.tape.sql import NoTapeWriterError, position
    try:
        bus = await connect(url, name="yeto-health", connect_timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - any failure to reach the bus is the answer
        return TapeHealth(False, error=str(e).splitlines()[0])
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            try:
                tape_seq = await position(bus, timeout=timeout_s)   # the writer's own answer: no query worker needed
                break
            except (NoTapeWriterError, ValueError) as e:
                if exited():
                    return TapeHealth(False, error=EXITED)
                if loop.time() >= deadline:
                    return TapeHealth(False, error=str(e).splitlines()[0])
                await asyncio.sleep(0.2)      # paces the questions to a writer still opening its file
        stream = (await bus.js.stream_info(EVT_STREAM)).state.last_seq if hasattr(bus, "js") else tape_seq
        return TapeHealth(True, tape_seq=tape_seq, stream_seq=int(stream))
    finally:
        await bus.close()
