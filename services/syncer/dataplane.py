"""The syncer's data plane: consume fragment chunks, drive one SyncerCore per run, publish what it decides.

A fragment message is acknowledged only after its effects: when the round it joined has merged (the
new version snapshotted and published) or when it was refused. A killed syncer therefore gets every
push of an open round redelivered, and a push it had already merged is refused by the ledger of its
snapshot as a duplicate. Several instances share a run by owning disjoint fragment sets
(`--shard k/n`: fragments p with p % n == k), each on its own durable consumer.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path

from nats.js.api import AckPolicy, ConsumerConfig

from yeto.infra.bus import Bus
from yeto.schemas.base import derive_id
from yeto.schemas.final import FinalCutDone, FinalCutRequested
from yeto.schemas.fragments import FragmentError, FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import FRAG_PREFIX, stream_for
from yeto.schemas.training import LearnerRejected
from yeto.services.syncer import snapshot
from yeto.services.syncer.bus_sink import BusSink
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.outputs import Broadcast, perform_async

log = logging.getLogger(__name__)
MAX_FRAGMENTS = 256
ACK_WAIT_S = 30.0          # a dead syncer's unacknowledged pushes reach its successor this soon


class DataPlane:
    def __init__(self, *, state_dir: Path, shard: tuple[int, int] = (0, 1), instance: str = "syncer"):
        self.dir, self.shard, self.instance = Path(state_dir) / "syncer", shard, instance
        self.cores: dict[str, SyncerCore] = {}
        self.held: dict[tuple[str, int], list] = {}        # (run, fragment) -> messages awaiting their round
        self.cut_started: set[str] = set()
        self.cutting: set[str] = set()
        self.wake_at: float | None = None
        self.lock = asyncio.Lock()
        self.sub = None                  # the fragment consumer, once consume() runs
        self.busy = False                # a fetched batch is being taken in

    def owned(self) -> list[int]:
        k, n = self.shard
        return list(range(k, MAX_FRAGMENTS, n))

    def core(self, run_id: str, sync: dict) -> SyncerCore:
        if run_id not in self.cores:
            core = SyncerCore(SyncConfig.from_dict(sync), run_id=run_id, fragments=self.owned() if self.shard[1] > 1 else None,
                              source=self.instance)
            # Shards share the run's snapshot folder: restore only this shard's fragments.
            snaps = {p: s for p, s in snapshot.read_all(self.dir / run_id).items() if core.owned is None or p in core.owned}
            if snaps:
                core.restore(snaps, time.monotonic())
                log.info("run %s: resumed %d fragments from snapshots (versions %s)", run_id, len(snaps),
                         {p: s.version for p, s in snaps.items()})
            self.cores[run_id] = core
        return self.cores[run_id]

    async def consume(self, bus: Bus, runs, stop: asyncio.Event) -> None:
        """Pull fragment chunks until stopped; `runs()` returns the current {run_id: RunInfo}."""
        k, n = self.shard
        subjects = [f"{FRAG_PREFIX}.>"] if n == 1 else [f"{FRAG_PREFIX}.*.{p}" for p in self.owned()]
        durable = "syncer" if n == 1 else f"syncer-{k}of{n}"
        # The stream is named: nats-py would look it up by subject, and a sharded consumer has no single one.
        sub = await bus.js.pull_subscribe(subjects[0] if n == 1 else "", durable=durable, stream=stream_for(subjects[0]).name, config=ConsumerConfig(
            ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S, max_ack_pending=100_000,
            filter_subjects=None if n == 1 else subjects))
        self.sub = sub
        kept_alive = time.monotonic()
        while not stop.is_set():
            await self.tick(bus)
            if time.monotonic() - kept_alive > ACK_WAIT_S / 3:
                kept_alive = time.monotonic()
                await self.keep_alive()
            try:
                batch = await sub.fetch(256, timeout=self.timeout())
            except asyncio.TimeoutError:
                continue
            except Exception as e:  # noqa: BLE001 - reconnecting; fetch again
                log.debug("fetch: %r", e)
                await asyncio.sleep(0.2)
                continue
            self.busy = True
            try:
                for raw in batch:
                    await self.receive(bus, raw, runs())
            finally:
                self.busy = False

    async def keep_alive(self) -> None:
        """Tell the server the held pushes are still being worked on (their round is open), so the short
        ack_wait only runs out for pushes whose syncer died, which then reach its successor within it."""
        for msgs in list(self.held.values()):
            for raw in msgs:
                try:
                    await raw.in_progress()
                except Exception as e:  # noqa: BLE001 - reconnecting: redelivery is harmless (duplicates are refused)
                    log.debug("in_progress: %r", e)
                    return

    def timeout(self) -> float:
        if self.wake_at is None:
            return 1.0
        return min(1.0, max(0.005, self.wake_at - time.monotonic()))

    async def receive(self, bus: Bus, raw, runs: dict) -> None:
        run_id = raw.subject.split(".")[2]
        info = runs.get(run_id)
        if info is None:                    # the RunLaunched event has not reached us yet
            await raw.nak(delay=1.0)
            return
        if run_id in self.cutting or info.cut_done:
            await raw.ack()                 # the run is being finalized: no more rounds
            return
        try:
            header = FragmentHeader.from_nats(dict(raw.headers or {}))
        except FragmentError as e:
            await bus.publish(LearnerRejected(id=derive_id(self.instance, raw.metadata.sequence.stream, "bad_header"),
                                              run_id=run_id, source=self.instance, learner="?", fragment=-1,
                                              reason=e.reason, detail=e.detail))
            await raw.term()
            return
        async with self.lock:
            outputs = self.core(run_id, info.sync).receive(header, raw.data, time.monotonic())
            refused = any(isinstance(o, LearnerRejected) for o in outputs)
            if not refused:
                self.held.setdefault((run_id, header.fragment), []).append(raw)
            await self.perform(bus, run_id, outputs)
        if refused:
            await raw.ack()

    async def tick(self, bus: Bus) -> None:
        if self.wake_at is None or time.monotonic() < self.wake_at:
            return
        self.wake_at = None
        async with self.lock:
            for run_id, core in list(self.cores.items()):
                await self.perform(bus, run_id, core.tick(time.monotonic()))

    async def perform(self, bus: Bus, run_id: str, outputs: list) -> BusSink:
        sink = BusSink(bus, run_id, self.dir / run_id, self.instance)
        await perform_async(outputs, sink)
        if sink.wake_at is not None:
            self.wake_at = sink.wake_at if self.wake_at is None else min(self.wake_at, sink.wake_at)
        for p in sink.closed:               # effects done: the round's messages can go
            for raw in self.held.pop((run_id, p), []):
                await raw.ack()
        return sink

    async def drain(self, run_id: str, timeout_s: float = 15.0) -> None:
        """Wait (bounded) until every push in the fragment stream has been delivered here and taken in: the
        learners' last pushes, sent as they finished, belong in the final cut. Not by counting the run's
        messages left in the stream: those a killed predecessor had taken stay there until the consumer's
        ack_wait, and each cut after a syncer crash waited out the whole timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                undelivered = (await self.sub.consumer_info()).num_pending if self.sub else None
            except Exception as e:  # noqa: BLE001 - reconnecting: ask again
                log.debug("consumer info: %r", e)
                undelivered = None
            if undelivered == 0 and not self.busy:
                return
            await asyncio.sleep(0.1)
        log.warning("run %s: final cut after %.0fs with pushes still unread", run_id, timeout_s)

    async def final_cut(self, bus: Bus, request: FinalCutRequested, sync: dict) -> None:
        """Merge what is in, snapshot every fragment, broadcast exact f32 keyframes of Θ, report FinalCutDone."""
        run_id = request.run_id
        if run_id in self.cut_started:
            return
        self.cut_started.add(run_id)
        await self.drain(run_id)
        self.cutting.add(run_id)
        async with self.lock:
            core = self.core(run_id, sync)
            await self.perform(bus, run_id, core.final_cut(time.monotonic()))
            digest, versions = hashlib.sha256(), {}
            for p in sorted(core.fragments):
                _, sha = await asyncio.to_thread(snapshot.write, self.dir / run_id, core.snapshot(p))
                digest.update(sha.encode())
                versions[p] = core.fragments[p].version
                await self.perform(bus, run_id, [Broadcast(*core.fragments[p].exact_keyframe())])
            for key in [k for k in self.held if k[0] == run_id]:
                for raw in self.held.pop(key):
                    await raw.ack()
        k, n = self.shard
        await bus.publish(request.caused(FinalCutDone, f"{k}/{n}", versions=versions, snapshot_path=str(self.dir / run_id),
                                         sha256=digest.hexdigest(), keyframe_versions=versions, source=self.instance,
                                         shard=k, num_shards=n))
