"""Fragment messages held until their round's effects are done: acknowledged when it closes, kept alive meanwhile.

A message is acknowledged only when the round it joined has merged (the new version published and, when a
snapshot was due, that snapshot durable: `release_after`) or aborted. Until then `keep_alive` tells the server
it is still being worked on, so the short ack_wait only runs out for the messages of a syncer that died, which
then reach its successor within it.

A leased syncer (a head over several VMs: lease.py) keeps its consumer through a takeover, with a 4 s ack wait
(takeover.py): it keeps its messages alive every second from a task of their own (`keep`), not between the data
plane's batches (a publish retried through an election holds those up for seconds), and only while its lease is
fresh (`fresh`): a holder that may no longer publish lets its messages go to its successor. A message redelivered
while held (a loop stalled past the ack wait) is recognized by its stream sequence (`holds`) and left out, not taken
in twice; the held copy's acknowledgement settles it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from yeto.infra.bus import Delivery

log = logging.getLogger(__name__)


class Held:
    def __init__(self) -> None:
        self.msgs: dict[tuple[str, int], list[Delivery]] = {}     # (run, fragment) -> messages awaiting their round
        self.waiting: list[list[Delivery]] = []                   # a closed round's messages awaiting its snapshot
        self.tasks: set[asyncio.Task] = set()
        self.seqs: set[int] = set()                               # the stream sequences of all of them
        self.fresh: Callable[[], bool] = lambda: True             # a leased syncer: whether its lease is fresh
        self.late = 0.0                                           # the longest gap between two keep-alives (`keep`)

    def hold(self, run_id: str, fragment: int, msg: Delivery) -> None:
        self.msgs.setdefault((run_id, fragment), []).append(msg)
        self.seqs.add(msg.seq)

    def holds(self, seq: int) -> bool:
        """Whether the message of stream sequence `seq` is held here: a delivery of it is a redelivery."""
        return seq in self.seqs

    async def release(self, run_id: str, fragment: int) -> None:
        for msg in self.msgs.pop((run_id, fragment), []):
            await msg.ack()
            self.seqs.discard(msg.seq)

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
            self.seqs.difference_update(msg.seq for msg in msgs)
            return
        finally:
            self.waiting.remove(msgs)
        for msg in msgs:
            await msg.ack()
            self.seqs.discard(msg.seq)

    async def settle(self) -> None:
        """Wait for every acknowledgement that waits on a snapshot."""
        while self.tasks:
            await asyncio.wait(list(self.tasks))

    async def release_run(self, run_id: str) -> None:
        for run, fragment in [key for key in self.msgs if key[0] == run_id]:
            await self.release(run, fragment)

    async def keep(self, every_s: float, stop: asyncio.Event) -> None:
        """`keep_alive` every `every_s` until stopped; the longest gap between two noted in `late`, and logged when it
        passes twice `every_s` (the loop was held up: a long merge, a slow machine)."""
        last = time.monotonic()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except asyncio.TimeoutError:
                pass
            now = time.monotonic()
            if now - last > max(self.late, 2 * every_s):
                log.info("held messages kept alive %.1fs after the last time (every %gs asked)", now - last, every_s)
            self.late, last = max(self.late, now - last), now
            await self.keep_alive()

    async def keep_alive(self) -> None:
        if not self.fresh():
            return                      # a lease not renewed lately: its successor may get the messages
        for msgs in [*self.msgs.values(), *self.waiting]:
            for msg in msgs:
                try:
                    await msg.in_progress()
                except Exception as e:  # noqa: BLE001 - reconnecting: redelivery is harmless (duplicates are refused)
                    log.debug("in_progress: %r", e)
                    return
