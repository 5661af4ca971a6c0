"""What a leased syncer publishes through: every publish, and each try of one retried through an election, waits for
the lease's fence (services/syncer/lease.py)."""
from __future__ import annotations

import asyncio

from yeto.infra.bus.snapshot_store import retrying
from yeto.infra.bus.types import subject_of
from yeto.schemas.base import to_bytes
from yeto.services.syncer.lease import Lease


class FencedBus:
    """A bus whose publishes wait for the lease's fence: what a leased syncer publishes through."""

    def __init__(self, bus, lease: Lease):
        self._bus, self.lease = bus, lease
        self.replicas = lease.replicas      # the copies of every stream (infra/bus/snapshot_store.py replicas_of)

    async def fence(self) -> None:
        await self.lease.fence()

    async def publish(self, msg, *, retry_for: float = 60.0) -> int:
        return await self.publish_raw(subject_of(msg), to_bytes(msg), msg_id=msg.id, retry_for=retry_for)

    async def publish_raw(self, subject: str, payload: bytes, *, retry_for: float = 60.0, **kwargs) -> int:
        """Each try fenced: a publish retried through an election is sent again only while the lease is fresh."""
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + retry_for, 0.05
        while True:
            await self.lease.fence()
            try:
                return await self._bus.publish_raw(subject, payload, retry_for=0.0, **kwargs)
            except ConnectionError:         # the bus's word for a try that timed out or found no stream leader
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def last(self, subject: str):
        """The subject's last message, asked again while its stream elects a leader (a node just lost)."""
        return await retrying(lambda: self._bus.last(subject))

    def __getattr__(self, name: str):
        return getattr(self._bus, name)
