"""The syncer's fragment snapshots kept on the bus, off the syncer's disk: a head over several VMs loses no snapshot
with the syncer's VM (docs/CLUSTER.md).

A JetStream stream of its own, `YETO_FSNAP` (`yeto.snap.frag.<run>.<fragment>.…`, under the services' `yeto.snap.>`
permission and beside the services' `yeto.snap.<service>`, which it does not overlap), with as many copies as the
event stream has: created by the first put, only where that is more than one (a single-VM head has its mirror
instead, infra/head/, and writes nothing here). Each subject keeps its newest message only. A snapshot file goes in
chunks into one of two slots per fragment, the one the fragment's head (`.head`, a JSON manifest: slot, chunks, size,
sha256, version, put id) does not name, and the head is published last: a put cut short leaves the previous snapshot
whole, and `get` reads only what a head names, each chunk checked to carry its put id and the file its sha256. Newest
only: a fragment holds at most two snapshots (the named one and the slot being written). Nothing here purges a
stream (services may not): an ended run's snapshots stay until the stream's limits or an operator remove them.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid
from pathlib import Path

from yeto.schemas.subjects import EVT_STREAM, SNAP_PREFIX

STREAM = "YETO_FSNAP"
PREFIX = f"{SNAP_PREFIX}.frag"
CHUNK = 4 * 1024 * 1024          # under the server's 8 MiB max_payload, with room for headers
WINDOW = 16                      # chunks in flight at once (each waits for its ack)
PUT_HEADER = "Yeto-Put"
RETRY_S = 30.0                   # a put waits this long for a stream leader (an election after a node's loss)
# The shards' leases (services/syncer/lease.py), beside: a head node's supervisor reads them (infra/stack/standby.py)
LEASE_STREAM, LEASE_PREFIX = "YETO_LEASE", f"{SNAP_PREFIX}.lease"


def head_subject(run_id: str, fragment: int) -> str:
    return f"{PREFIX}.{run_id}.{fragment}.head"


def chunk_subject(run_id: str, fragment: int, slot: int, index: int) -> str:
    return f"{PREFIX}.{run_id}.{fragment}.{slot}.{index}"


class SnapshotStore:
    """Puts and gets the snapshot files of a run's fragments on a NATS bus (infra/bus/nats_bus.py: its `js`)."""

    def __init__(self, js, replicas: int, fence=None):
        self.js, self.replicas, self.fence = js, replicas, fence    # fence: awaited before a head is published
        self.ready = False

    @classmethod
    async def of(cls, bus) -> SnapshotStore | None:
        """The store on `bus` where its event stream has more than one copy; None on one copy or a bus without
        JetStream (the in-memory bus of pure tests). A bus with a `fence` (a leased syncer's) has it awaited before
        each head is published."""
        replicas = await replicas_of(bus)
        return cls(bus.js, replicas, getattr(bus, "fence", None)) if replicas > 1 else None

    async def _ensure(self) -> None:
        if not self.ready:
            await ensure_stream(self.js, STREAM, f"{PREFIX}.>", self.replicas, CHUNK + 64 * 1024)
            self.ready = True

    async def head(self, run_id: str, fragment: int) -> dict | None:
        from nats.js.errors import NotFoundError

        await self._ensure()
        try:
            msg = await retrying(lambda: self.js.get_last_msg(STREAM, head_subject(run_id, fragment)))
        except NotFoundError:
            return None
        return json.loads(msg.data)

    async def put(self, run_id: str, fragment: int, version: int, path: Path) -> dict:
        """Put the snapshot file at `path` (fragment `fragment` at `version`); its manifest once it is the newest."""
        previous = await self.head(run_id, fragment)
        slot = 1 - previous["slot"] if previous else 0
        put = uuid.uuid4().hex
        digest, size, index, pending = hashlib.sha256(), 0, 0, []
        with open(path, "rb") as f:
            while data := await asyncio.to_thread(f.read, CHUNK):
                digest.update(data)
                size += len(data)
                pending.append(self._publish(chunk_subject(run_id, fragment, slot, index), data, {PUT_HEADER: put}))
                index += 1
                if len(pending) >= WINDOW:
                    await asyncio.gather(*pending)
                    pending = []
        await asyncio.gather(*pending)
        manifest = dict(slot=slot, chunks=index, size=size, sha256=digest.hexdigest(), version=version, put=put)
        await self._publish(head_subject(run_id, fragment), json.dumps(manifest, sort_keys=True).encode(), None,
                            fenced=True)
        return manifest

    async def _publish(self, subject: str, data: bytes, headers: dict | None, fenced: bool = False) -> None:
        """`fenced`: each try waits for the fence first (a syncer that lost its lease names no snapshot,
        services/syncer/lease.py), a retry through an election too."""
        async def once():
            if fenced and self.fence is not None:
                await self.fence()
            return await self.js.publish(subject, data, stream=STREAM, headers=headers)
        await retrying(once)

    async def fragments(self, run_id: str) -> list[int]:
        """The fragments of `run_id` with a snapshot here."""
        await self._ensure()
        info = await retrying(lambda: self.js.stream_info(STREAM, subjects_filter=f"{PREFIX}.{run_id}.*.head"))
        return sorted(int(s.split(".")[-2]) for s in (info.state.subjects or {}))

    async def get(self, run_id: str, fragment: int, dest: Path) -> dict | None:
        """Write fragment `fragment`'s newest snapshot to `dest` (atomically, fsynced); its manifest, None if there is
        none. A chunk of another put or a file of another sha256 is refused (ValueError): nothing is written."""
        manifest = await self.head(run_id, fragment)
        if manifest is None:
            return None
        digest, tmp = hashlib.sha256(), dest.with_suffix(f".fetch{os.getpid()}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(tmp, "wb") as f:
                for index in range(manifest["chunks"]):
                    subject = chunk_subject(run_id, fragment, manifest["slot"], index)
                    msg = await retrying(lambda: self.js.get_last_msg(STREAM, subject))   # noqa: B023 - awaited here
                    if (msg.headers or {}).get(PUT_HEADER) != manifest["put"]:
                        raise ValueError(f"run {run_id} fragment {fragment}: chunk {index} of its replicated snapshot "
                                         f"is not of the put its head names")
                    digest.update(msg.data)
                    f.write(msg.data)
                f.flush()
                os.fsync(f.fileno())
            if digest.hexdigest() != manifest["sha256"]:
                raise ValueError(f"run {run_id} fragment {fragment}: the replicated snapshot's sha256 is not its head's")
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        return manifest


async def retrying(call):
    """`await call()`, again while a stream elects a leader (a node lost) for RETRY_S."""
    from yeto.infra.bus.nats_bus import retryable

    loop = asyncio.get_running_loop()
    deadline = loop.time() + RETRY_S
    while True:
        try:
            return await call()
        except Exception as e:
            if not retryable(e) or loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)    # an election: nothing to wait on but the next answer


async def ensure_stream(js, name: str, subjects: str, replicas: int, max_msg_size: int) -> None:
    """A file stream keeping each subject's newest message, with `replicas` copies, unless it exists."""
    from nats.js.api import StorageType, StreamConfig
    from nats.js.errors import NotFoundError

    config = StreamConfig(name=name, subjects=[subjects], max_msgs_per_subject=1, storage=StorageType.FILE,
                          num_replicas=replicas, max_msg_size=max_msg_size)
    try:
        await retrying(lambda: js.stream_info(name))
    except NotFoundError:
        await retrying(lambda: js.add_stream(config))


async def replicas_of(bus) -> int:
    """Copies of the event stream on `bus`: more than one on a head over several VMs (0 on a bus without JetStream).
    A bus that knows them (a leased syncer's: its lease asked once) is not asked again: the event stream may be electing
    a leader then (its node just lost), and a takeover would wait for that."""
    if isinstance(known := getattr(bus, "replicas", None), int):
        return known
    js = getattr(bus, "js", None)
    return 0 if js is None else (await retrying(lambda: js.stream_info(EVT_STREAM))).config.num_replicas or 1
