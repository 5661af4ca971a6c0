"""Where a run's SyncerCore outputs go in the service: snapshots to disk, broadcast chunks and events to the bus.

The outputs.Sink of the data plane (services/syncer/dataplane.py). It also notes what the data plane acts
on afterwards: the fragments whose round closed (their held messages can be acknowledged) and the
earliest wake-up asked for.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

from yeto.infra.bus import Bus
from yeto.schemas.base import Event, derive_id
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.subjects import CHUNK_BYTES, delta_subject, keyframe_subject
from yeto.schemas.training import RoundAborted, RoundMerged, SnapshotWritten
from yeto.services.syncer import snapshot
from yeto.services.syncer.snapshot import FragmentSnapshot


class BusSink:
    chunk_bytes = CHUNK_BYTES

    def __init__(self, bus: Bus, run_id: str, directory: Path, source: str) -> None:
        self.bus, self.run_id, self.dir, self.source = bus, run_id, Path(directory), source
        self.closed: set[int] = set()          # fragments whose round merged or aborted
        self.wake_at: float | None = None

    async def snapshot(self, snap: FragmentSnapshot) -> None:
        path, sha = await asyncio.to_thread(snapshot.write, self.dir, snap)
        await self.bus.publish(SnapshotWritten(id=derive_id(self.run_id, "SnapshotWritten", snap.fragment, snap.version),
                                               run_id=self.run_id, source=self.source, path=str(path),
                                               versions={snap.fragment: snap.version}, sha256=sha))

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
