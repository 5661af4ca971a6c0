"""Fragment messages held until their round's effects are done: acknowledged when it closes, kept alive meanwhile.

A message is acknowledged only when the round it joined has merged (the new version published and, when a
snapshot was due, that snapshot durable: `release_after`) or aborted. Until then `keep_alive` tells the server
it is still being worked on, so the short ack_wait only runs out for the messages of a syncer that died, which
then reach its successor within it.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from yeto.infra.bus import Delivery

log = logging.getLogger(__name__)


class Held:
    def __init__(self) -> None:
        self.msgs: dict[tuple[str, int], list[Delivery]] = {}     # (run, fragment) -> messages awaiting their round
        self.waiting: list[list[Delivery]] = []                   # a closed round's messages awaiting its snapshot
        self.tasks: set[asyncio.Task] = set()

    def hold(self, run_id: str, fragment: int, msg: Delivery) -> None:
        self.msgs.setdefault((run_id, fragment), []).append(msg)

    async def release(self, run_id: str, fragment: int) -> None:
        for msg in self.msgs.pop((run_id, fragment), []):
            await msg.ack()

    def release_after(self, run_id: str, fragment: int, durable: Awaitable) -> None:
        """The fragment's messages so far (its closed round's) are acknowledged once `durable` is done, and not at all
        if it fails (a successor gets them again); kept alive meanwhile."""
        msgs = self.msgs.pop((run_id, fragment), [])
        self.waiting.append(msgs)
        task = asyncio.create_task(self._ack_after(msgs, durable))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _ack_after(self, msgs: list[Delivery], durable: Awaitable) -> None:
        try:
            await durable
        except BaseException:  # noqa: BLE001 - the writer reports it; unacknowledged, they are delivered again
            return
        finally:
            self.waiting.remove(msgs)
        for msg in msgs:
            await msg.ack()

    async def settle(self) -> None:
        """Wait for every acknowledgement that waits on a snapshot."""
        while self.tasks:
            await asyncio.wait(list(self.tasks))

    async def release_run(self, run_id: str) -> None:
        for run, fragment in [key for key in self.msgs if key[0] == run_id]:
            await self.release(run, fragment)

    async def keep_alive(self) -> None:
        for msgs in [*self.msgs.values(), *self.waiting]:
            for msg in msgs:
                try:
                    await msg.in_progress()
                except Exception as e:  # noqa: BLE001 - reconnecting: redelivery is harmless (duplicates are refused)
                    log.debug("in_progress: %r", e)
                    return
