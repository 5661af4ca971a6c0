"""Where a run's SyncerCore outputs go in the service: snapshots to disk, broadcast chunks and events to the bus.

The outputs.Sink of the data plane (services/syncer/dataplane.py). It also notes what the data plane acts
on afterwards: the fragments whose round closed (their held messages can be acknowledged, once the
snapshot written for them, if any, is durable) and the earliest wake-up asked for.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

from yeto.infra.bus import Bus
from yeto.schemas.base import Event
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.subjects import CHUNK_BYTES, delta_subject, keyframe_subject
from yeto.schemas.training import RoundAborted, RoundMerged
from yeto.services.syncer.durable import SnapshotWriter
from yeto.services.syncer.snapshot import FragmentSnapshot


class BusSink:
    chunk_bytes = CHUNK_BYTES

    def __init__(self, bus: Bus, run_id: str, directory: Path, source: str, writer: SnapshotWriter) -> None:
        self.bus, self.run_id, self.dir, self.source, self.writer = bus, run_id, Path(directory), source, writer
        self.closed: set[int] = set()          # fragments whose round merged or aborted
        self.writing: dict[int, asyncio.Task] = {}   # fragment -> the background write of its new version
        self.wake_at: float | None = None

    async def snapshot(self, snap: FragmentSnapshot) -> None:
        await self.writer.later(self.bus, self.run_id, self.dir, self.source, snap)

    async def snapshot_later(self, snap: FragmentSnapshot) -> None:
        self.writing[snap.fragment] = self.writer.later(self.bus, self.run_id, self.dir, self.source, snap)

    async def chunk(self, h: FragmentHeader, chunk: bytes) -> None:
        subject = (keyframe_subject if h.kind == "keyframe" else delta_subject)(h.run_id, h.fragment, h.chunk)
        # The id names the content: a resend of the same bytes is dropped by the stream, while another keyframe
        # of the same version (the final cut's exact Θ after the shadow's) still goes out.
        msg_id = f"g.{h.run_id}.{h.fragment}.{h.kind}.{h.version}.{h.sha256[:16]}.{h.chunk}"
        await self.bus.publish_raw(subject, chunk, msg_id=msg_id, headers=h.to_nats())

    async def event(self, event: Event) -> None:
        await self.bus.publish(event)
        if isinstance(event, (RoundMerged, RoundAborted)):
            self.closed.add(event.fragment)

    async def wake(self, at: float) -> None:
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)
