"""A run's learner log lines from its log stream (YETO_LOG): the newest at once, then, following, each batch as it lands.

Lines are printed in stream order (the order they reached the bus), prefixed with their learner unless one island
was asked for. Following ends with the run (RunFinalized, RunFailed, RunStopped on the tape, after the learners'
last lines) or with Ctrl-C. The newest lines are found by reading the run's lines from the first: the stream keeps
at most 7 days or 1 GiB of them.
"""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import TextIO

from yeto.cli.follow import TERMINAL
from yeto.infra.bus import Consumer, Delivery, connect
from yeto.schemas.subjects import event_subject, log_subject

PAGE = 256
LAST_LINES_S = 2.0     # after the run ends, how long to wait for the learners' last lines


def learner_of(subject: str) -> str:
    """The learner token of a `log_subject`."""
    return subject.split(".", 3)[3]


def lines_of(deliveries: Iterable[Delivery], *, prefixed: bool) -> list[str]:
    out = []
    for d in deliveries:
        prefix = f"[{learner_of(d.subject)}] " if prefixed else ""
        out += [prefix + line for line in d.data.decode("utf-8", "replace").splitlines()]
    return out


async def _backlog(consumer: Consumer, *, keep: int, prefixed: bool, seen: set[str]) -> list[str]:
    """The last `keep` lines stored now (read from the first: a consumer cannot start at the Nth line from the end)."""
    newest: deque[str] = deque(maxlen=keep)
    pending = await consumer.num_pending()
    while pending:
        page = await consumer.fetch(PAGE, 5.0)
        if not page:
            break
        seen.update(learner_of(d.subject) for d in page)
        newest.extend(lines_of(page, prefixed=prefixed))
        pending = page[-1].num_pending
    return list(newest)


async def _run_ended(bus, run_id: str) -> asyncio.Future[None]:
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_end(_: Delivery) -> None:
        if not ended.done():
            ended.set_result(None)
    for kind in TERMINAL:
        await bus.watch(event_subject(run_id, kind), on_end)   # closed with the connection
    return ended


async def read_logs(url: str, run_id: str, learner: str | None, *, lines: int, out: TextIO,
                    then: Callable[[int, set[str]], bool]) -> None:
    """Print the run's newest `lines` log lines (of `learner`, or of all), then call `then(lines printed, learners
    that have lines)`; when it says so, follow: print every new line until the run ends."""
    bus = await connect(url, name=f"logs-{run_id}", connect_timeout=5)
    try:
        try:
            consumer = await bus.consumer([log_subject(run_id, learner or "*")], ack=False)
        except Exception:  # noqa: BLE001 - a stack started by an older Yeto has no log stream: nothing to read there
            then(0, set())
            return
        seen: set[str] = set()
        printed = _write(out, await _backlog(consumer, keep=lines, prefixed=learner is None, seen=seen))
        ended = await _run_ended(bus, run_id) if then(printed, seen) else None
        while ended is not None:
            done = ended.done()
            page = await consumer.fetch(PAGE, LAST_LINES_S if done else 0.5)
            _write(out, lines_of(page, prefixed=learner is None))
            if done and not page:
                break
        await consumer.close()
    finally:
        await bus.close()


def _write(out: TextIO, lines: list[str]) -> int:
    for line in lines:
        out.write(line + "\n")
    out.flush()
    return len(lines)
