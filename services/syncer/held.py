"""Fragment messages held until their round's effects are done: acknowledged when it closes, kept alive meanwhile.

A message is acknowledged only when the round it joined has merged (the new version snapshotted and
published) or aborted. Until then `keep_alive` tells the server it is still being worked on, so the short
ack_wait only runs out for the messages of a syncer that died, which then reach its successor within it.
"""
from __future__ import annotations

import logging

from yeto.infra.bus import Delivery

log = logging.getLogger(__name__)


class Held:
    def __init__(self) -> None:
        self.msgs: dict[tuple[str, int], list[Delivery]] = {}     # (run, fragment) -> messages awaiting their round

    def hold(self, run_id: str, fragment: int, msg: Delivery) -> None:
        self.msgs.setdefault((run_id, fragment), []).append(msg)

    async def release(self, run_id: str, fragment: int) -> None:
        for msg in self.msgs.pop((run_id, fragment), []):
            await msg.ack()

    async def release_run(self, run_id: str) -> None:
        for run, fragment in [key for key in self.msgs if key[0] == run_id]:
            await self.release(run, fragment)

    async def keep_alive(self) -> None:
        for msgs in list(self.msgs.values()):
            for msg in msgs:
                try:
                    await msg.in_progress()
                except Exception as e:  # noqa: BLE001 - reconnecting: redelivery is harmless (duplicates are refused)
                    log.debug("in_progress: %r", e)
                    return
