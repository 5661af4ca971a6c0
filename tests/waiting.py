"""Waiting in tests on a real condition (an event seen, a file written, a process gone), never a fixed sleep.

`wait_for` polls the condition until it holds or the deadline passes, then fails naming what did not
happen; the short interval only bounds how late the test notices, it synchronizes nothing. `until` is
the same inside an event loop, woken by the producer's `changed` event instead of polling when it has one.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _failed(timeout: float, what: str, detail: Callable[[], str] | None) -> AssertionError:
    return AssertionError(f"waited {timeout:g}s for {what}" + (f":\n{detail()}" if detail else ""))


def wait_for(check: Callable[[], T], timeout: float, what: str, *, interval: float = 0.05,
             detail: Callable[[], str] | None = None) -> T:
    """The first truthy value of `check()`; after `timeout` s an AssertionError saying `what` did not
    happen (with `detail()`, when given, to show what was seen instead)."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() > deadline:
            raise _failed(timeout, what, detail)
        time.sleep(interval)
    return got


async def until(check: Callable[[], T], timeout: float, what: str, *, changed: asyncio.Event | None = None,
                interval: float = 0.02, detail: Callable[[], str] | None = None) -> T:
    """`wait_for` in an event loop; with `changed` (set by whoever produces what `check` reads) it sleeps
    until that news instead of polling."""
    deadline = time.monotonic() + timeout
    while True:
        if changed is not None:
            changed.clear()             # before the check: news that lands after it wakes the wait below
        if got := check():
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failed(timeout, what, detail)
        if changed is None:
            await asyncio.sleep(min(interval, left))
            continue
        try:
            await asyncio.wait_for(changed.wait(), left)
        except asyncio.TimeoutError:
            pass


async def until_answered(ask: Callable[[], Awaitable[T]], timeout: float, what: str, *, interval: float = 0.05,
                         detail: Callable[[], str] | None = None) -> T:
    """`until` for a condition only a remote party can answer (a query over the bus, no news to wait on): the first
    truthy answer of `await ask()`; a ValueError (the answerer is not up yet) counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if got := await ask():
                return got
        except ValueError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failed(timeout, what, detail)
        await asyncio.sleep(min(interval, left))
