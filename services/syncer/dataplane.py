"""The syncer's data plane: consume fragment chunks, drive one SyncerCore per run, perform what it decides.

A fragment message is acknowledged only after its effects (held.py): when the round it joined has
merged and the snapshot of the new version, written in the background after the broadcast (durable.py),
is durable, or when it was refused. A killed syncer therefore gets every push not in a durable snapshot
redelivered, and a push it had already merged is refused by the ledger of its snapshot as a duplicate.
A restarted syncer asks the global streams which version of each fragment went out last, and resumes past
it when its snapshot is older (core.restore). Instances
share a run by owning disjoint fragment sets (`--shard k/n`: fragments p with p % n == k), each on its
own durable consumer. Only I/O lives here: what a message does is SyncerCore's (core.py), where its
outputs go is bus_sink.py's. A refused message is terminated (never redelivered); one for a run without
RunLaunched, or from a learner generation not announced yet, is nak'ed UNKNOWN_RUN_NAKS times (the event
may lag), then terminated with its event.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from yeto.infra.bus import Bus, Consumer, Delivery
from yeto.infra.run_paths import run_path
from yeto.schemas.fragments import FragmentError, FragmentHeader, prehashed
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import delta_subject, fragment_filters, keyframe_subject, learner_of_fragment, run_of_fragment
from yeto.services.syncer import seed, snapshot, warmup
from yeto.services.syncer.bus_sink import BusSink
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.durable import SnapshotWriter, fetch_replicated
from yeto.services.syncer.held import Held
from yeto.services.syncer.outputs import perform_async
from yeto.services.syncer.refusals import UNKNOWN_RUN_DELAY_S, UNKNOWN_RUN_NAKS, Refusals
from yeto.services.syncer.roster import Roster
from yeto.services.syncer.runs import RunInfo

log = logging.getLogger(__name__)
MAX_FRAGMENTS = 256
ACK_WAIT_S = 30.0          # a dead syncer's unacknowledged pushes reach its successor this soon
MAX_DELIVER = 64           # the server drops a message delivered this often (naks and dead syncers count)


class DataPlane:
    def __init__(self, *, state_dir: Path, shard: tuple[int, int] = (0, 1), instance: str = "syncer"):
        self.dir, self.shard, self.instance = Path(state_dir) / "syncer", shard, instance
        self.cores: dict[str, SyncerCore] = {}
        self.warmed: set[str] = set()                  # runs whose kernels warmup.py was asked to make
        self.held = Held()
        self.writer = SnapshotWriter()
        self.cut_started: set[str] = set()
        self.cutting: set[str] = set()
        self.wake_at: float | None = None
        self.lock = asyncio.Lock()
        self.consumer: Consumer | None = None    # the fragment consumer, once consume() runs
        self.busy = False                        # a fetched batch is being taken in
        self.refusals = Refusals(instance)
        self.run_dirs: dict[str, Path] = {}
        self.first: dict[str, list] = {}         # keyframes sent before a run's first message is taken in: a
                                                 # seeded run's versions, or a restored run's (core.restore)

    def run_dir(self, run_id: str) -> Path:
        """The run's snapshot folder, `<state>/syncer/<run_id>`, checked to stay there (once per run: every
        round's outputs go through here, and the check resolves the path on disk)."""
        if run_id not in self.run_dirs:
            self.run_dirs[run_id] = run_path(self.dir.parent, run_id, area="syncer")
        return self.run_dirs[run_id]

    def owned(self) -> list[int] | None:
        k, n = self.shard
        return None if n == 1 else list(range(k, MAX_FRAGMENTS, n))

    async def core(self, bus: Bus, run_id: str, sync: dict) -> SyncerCore:
        if run_id not in self.cores:
            core = SyncerCore(SyncConfig.from_dict(sync), run_id=run_id, fragments=self.owned(), source=self.instance)
            # Shards share the run's snapshot folder: restore only this shard's fragments.
            def own() -> dict:
                return {p: s for p, s in snapshot.read_all(self.run_dir(run_id)).items() if core.owned is None or p in core.owned}
            snaps = own()
            if not snaps and await fetch_replicated(bus, run_id, self.run_dir(run_id), core.owned):   # its VM lost
                snaps = own()
            if snaps:
                published = {p: v for p in snaps if (v := await last_published(bus, run_id, p)) is not None}
                published |= {p: max(v, published.get(p, 0)) for p, v in mirror_floor(self.run_dir(run_id)).items() if p in snaps}
                self.first[run_id] = core.restore(snaps, time.monotonic(), published)
                log.info("run %s: resumed %d fragments from snapshots (versions %s)", run_id, len(snaps),
                         {p: f.version for p, f in core.fragments.items()})
            elif seeded := seed.seed(core, sync, time.monotonic()):   # a resumed or branched run: its parent's versions
                self.first[run_id] = seeded
            self.cores[run_id] = core
        return self.cores[run_id]

    async def consume(self, bus: Bus, runs: Callable[[], dict[str, RunInfo]], stop: asyncio.Event) -> None:
        """Take in fragment chunks until stopped; `runs()` returns the current {run_id: RunInfo}."""
        if self.consumer is None:           # a leased syncer opened it already (services/syncer/wiring.py)
            await self.open(bus)
        kept_alive = time.monotonic()
        while not stop.is_set():
            self.warm(runs())
            await self.tick(bus, runs())
            if time.monotonic() - kept_alive > ACK_WAIT_S / 3:
                kept_alive = time.monotonic()
                await self.held.keep_alive()
            await self.take_in(bus, runs, timeout_s=self.timeout())
        await self.settle()

    def warm(self, runs: dict[str, RunInfo]) -> None:
        """A run not seen before and not being cut: its codecs' kernels made on a thread now, while its learners
        load, instead of in its first rounds (warmup.py; once per pair of codecs in this process)."""
        for run_id, info in runs.items():
            if run_id not in self.warmed:
                self.warmed.add(run_id)
                if run_id not in self.cores and info.cut_requested is None:
                    warmup.start(info.sync)

    async def settle(self) -> None:
        """Wait for the snapshots being written and the acknowledgements waiting on them."""
        await self.writer.drain()
        await self.held.settle()

    def durable(self) -> str:
        k, n = self.shard
        return "syncer" if n == 1 else f"syncer-{k}of{n}"

    async def open(self, bus: Bus, ack_wait_s: float = ACK_WAIT_S) -> None:
        self.consumer = await bus.consumer(fragment_filters(self.owned()), durable=self.durable(),
                                           ack_wait_s=ack_wait_s, max_deliver=MAX_DELIVER, max_ack_pending=100_000)

    async def take_in(self, bus: Bus, runs: Callable[[], dict[str, RunInfo]], timeout_s: float) -> int:
        """Fetch one batch of chunks and take each in, its effects done; how many came."""
        assert self.consumer is not None, "open() first"
        batch = await self.consumer.fetch(256, timeout_s=timeout_s)
        self.busy = True
        try:
            with prehashed([msg.data for msg in batch]):      # the chunks' SHA-256 on the kernel threads, at once
                for msg in batch:
                    await self.receive(bus, msg, runs())
        finally:
            self.busy = False
        return len(batch)

    def timeout(self) -> float:
        return 1.0 if self.wake_at is None else min(1.0, max(0.005, self.wake_at - time.monotonic()))

    async def receive(self, bus: Bus, msg: Delivery, runs: dict[str, RunInfo]) -> None:
        self.refusals.redelivered(msg.seq)
        run_id = run_of_fragment(msg.subject)
        info = runs.get(run_id)
        if info is None:                    # the RunLaunched event has not reached us yet, or never will
            if await self.refusals.retry(msg):
                return
            return await self.refusals.refuse(bus, msg, run_id, "unknown_run", f"no RunLaunched for run {run_id!r} after "
                                              f"{UNKNOWN_RUN_NAKS} deliveries {UNKNOWN_RUN_DELAY_S:g} s apart")
        if run_id in self.cutting or self.shard in info.cuts_done:
            await msg.ack()                 # the run is being finalized: no more rounds
            return
        if self.refusals.behind(msg) and await self.refusals.retry(msg):
            return                          # an earlier push of this learner and fragment waits for its retry: after it
        try:
            header = FragmentHeader.from_nats(msg.headers)
        except FragmentError as e:
            return await self.refusals.refuse(bus, msg, run_id, e.reason, e.detail)
        async with self.lock:
            core = await self.core(bus, run_id, info.sync)
            core.roster = roster_of(info)
            if run_id in self.first:        # seeded or restored versions go out before anything of the run is taken in
                await self.perform(bus, run_id, self.first.pop(run_id))
            outputs = core.receive(header, msg.data, time.monotonic(), sender=learner_of_fragment(msg.subject))
            refused = core.refused
            if refused == "not_announced" and await self.refusals.retry(msg):
                return                      # the launcher's IslandUp / IslandReplaced may lag: a while, not forever
            if not refused:
                self.held.hold(run_id, header.fragment, msg)
            await self.perform(bus, run_id, outputs)
        if refused:
            await msg.term()

    async def tick(self, bus: Bus, runs: dict[str, RunInfo] | None = None) -> None:
        """Rounds whose wake-up came due; and, at every turn (at most a second apart), the launcher's newest
        word on who is gone, so a round waiting on a dead learner merges without waiting for the next push."""
        async with self.lock:
            for run_id, core in list(self.cores.items()):
                info = (runs or {}).get(run_id)
                if info is not None and run_id not in self.cutting:
                    await self.perform(bus, run_id, core.follow(roster_of(info), time.monotonic()))
            if self.wake_at is None or time.monotonic() < self.wake_at:
                return
            self.wake_at = None
            for run_id, core in list(self.cores.items()):
                await self.perform(bus, run_id, core.tick(time.monotonic()))

    async def perform(self, bus: Bus, run_id: str, outputs: list) -> None:
        self.writer.check()
        sink = BusSink(bus, run_id, self.run_dir(run_id), self.instance, self.writer)
        await perform_async(outputs, sink)
        if sink.wake_at is not None:
            self.wake_at = sink.wake_at if self.wake_at is None else min(self.wake_at, sink.wake_at)
        for p in sink.closed:               # effects done: the round's messages can go once its snapshot is durable
            if p in sink.writing:
                self.held.release_after(run_id, p, sink.writing[p])
            else:
                await self.held.release(run_id, p)


def mirror_floor(run_dir: Path) -> dict[int, int]:
    """A replacement head's floor under each fragment's restored version (infra/head/restore.py): its dead
    predecessor may have published versions past the mirrored snapshots, which learners hold."""
    try:
        return {int(p): v for p, v in json.loads((run_dir / "mirror-floor.json").read_text()).items()}
    except FileNotFoundError:
        return {}


async def last_published(bus: Bus, run_id: str, fragment: int) -> int | None:
    """The newest version of `fragment` whose first chunk went out (a delta or a keyframe), None if none did."""
    versions = []
    for subject in (delta_subject(run_id, fragment, 0), keyframe_subject(run_id, fragment, 0)):
        found = await bus.last(subject)
        if found is None:
            continue
        try:
            versions.append(FragmentHeader.from_nats(found[0]).version)
        except FragmentError as e:          # only the syncer publishes there; a broken header does not count
            log.warning("run %s: the last message on %s has no valid header (%s)", run_id, subject, e.detail)
    return max(versions, default=None)


def roster_of(info: RunInfo) -> Roster:
    return Roster(info.generations, info.ranks, info.tokens_per_step, info.gone)
