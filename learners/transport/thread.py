"""The transport's lifetime: one background thread running one asyncio loop that does all the network work,
so the training thread only hands things over (`call`, `kick`) and never waits on the network.

`pump` publishes what is queued, backing off while the server is away (0.1 s doubling to 5 s), and
otherwise sleeps until kicked; after `stop` it publishes what is left, then returns.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


class BusThread:
    def __init__(self, name: str, main: Callable[[], Awaitable[None]]) -> None:
        self.loop = asyncio.new_event_loop()
        self._main = main
        self._wake: asyncio.Event | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    def call(self, fn: Callable[..., object], *args: object) -> None:
        """Run `fn(*args)` on the loop, soon (from any thread)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def kick(self) -> None:
        """Something was queued: wake the pump (from any thread)."""
        if self._wake is not None:
            self.loop.call_soon_threadsafe(self._wake.set)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, join_s: float = 10.0) -> None:
        self._stop.set()
        self.kick()
        self._thread.join(join_s)

    async def pump(self, send_one: Callable[[], Awaitable[bool]], pending: Callable[[], bool]) -> None:
        """Until stopped with nothing pending: publish one item after another; when nothing could be
        published, wait for a kick (or the backoff delay, while items wait for the server)."""
        self._wake = wake = asyncio.Event()
        delay = 0.1
        while not self._stop.is_set() or pending():
            if await send_one():
                delay = 0.1
                continue
            if self._stop.is_set() and not pending():
                break
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), delay if pending() else 1.0)
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, 5.0) if pending() else 0.1
