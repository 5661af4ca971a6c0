"""Snapshots written off the round's critical path, in version order per fragment, and what waits on them.

A round's broadcast goes out first; its snapshot is written by a worker thread meanwhile (`later`), chained
behind the fragment's previous write so an older snapshot never replaces a newer one. The round's pushes are
acknowledged only when the write is durable (held.py `release_after`), so a syncer killed in between leaves
them unacknowledged: its successor gets them again, restores the older snapshot and leaps past every version
that went out (core.restore). A write that fails is raised at the data plane's next turn (`check`), as a
failing synchronous write was; its pushes stay unacknowledged.

On a head over several VMs (the event stream has more than one copy) each snapshot is also put into the replicated
store (infra/bus/snapshot_store.py) before its pushes are acknowledged, and a syncer whose folder holds none of a run's
fragments fetches them from there (`fetch_replicated`): the syncer's VM lost, another node's syncer resumes where it
stopped (the same restore as after a restart, versions leaping past what went out).
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from yeto.infra.bus import Bus
from yeto.infra.bus.snapshot_store import SnapshotStore
from yeto.schemas.base import derive_id
from yeto.schemas.training import SnapshotWritten
from yeto.services.syncer import snapshot
from yeto.services.syncer.snapshot import FragmentSnapshot

log = logging.getLogger(__name__)


class SnapshotWriter:
    def __init__(self) -> None:
        self.tasks: dict[tuple[str, int], asyncio.Task] = {}    # (run, fragment) -> its newest write
        self.failed: BaseException | None = None
        self.store: SnapshotStore | None = None
        self.store_known = False               # whether `store` was asked of the bus yet (None: nothing replicated)

    def later(self, bus: Bus, run_id: str, directory: Path, source: str, snap: FragmentSnapshot) -> asyncio.Task:
        """Start writing `snap` after the fragment's previous write; the task's result is (path, sha256)."""
        key = (run_id, snap.fragment)
        task = asyncio.create_task(self._write(self.tasks.get(key), bus, run_id, directory, source, snap))
        self.tasks[key] = task
        task.add_done_callback(lambda t: self.tasks.pop(key) if self.tasks.get(key) is t else None)
        return task

    async def _write(self, previous: asyncio.Task | None, bus: Bus, run_id: str, directory: Path, source: str,
                     snap: FragmentSnapshot) -> tuple[Path, str]:
        if previous is not None:
            await asyncio.wait([previous])          # its failure is reported by its own task, once
        try:
            path, sha = await asyncio.to_thread(snapshot.write, directory, snap)
        except Exception as e:
            self.failed = self.failed or e
            log.error("run %s: snapshot of fragment %d version %d failed: %r", run_id, snap.fragment, snap.version, e)
            raise
        try:
            if (store := await self.replicated(bus)) is not None:
                await store.put(run_id, snap.fragment, snap.version, path)
        except Exception as e:
            self.failed = self.failed or e
            log.error("run %s: the replicated copy of fragment %d version %d failed: %r", run_id, snap.fragment,
                      snap.version, e)
            raise
        await bus.publish(SnapshotWritten(id=derive_id(run_id, "SnapshotWritten", snap.fragment, snap.version),
                                          run_id=run_id, source=source, path=str(path),
                                          versions={snap.fragment: snap.version}, sha256=sha))
        return path, sha

    async def replicated(self, bus: Bus) -> SnapshotStore | None:
        if not self.store_known:
            self.store, self.store_known = await SnapshotStore.of(bus), True
        return self.store

    async def drain(self, run_id: str | None = None) -> None:
        """Wait until every write started (of `run_id`, or of every run) is done, failed or not."""
        tasks = [t for (run, _), t in list(self.tasks.items()) if run_id in (None, run)]
        if tasks:
            await asyncio.wait(tasks)

    def check(self) -> None:
        """Raise the first write that failed: the data plane stops as it did when the write was in its path."""
        if self.failed is not None:
            raise RuntimeError(f"a syncer snapshot could not be written: {self.failed!r}") from self.failed


async def fetch_replicated(bus: Bus, run_id: str, directory: Path, owned: list[int] | None) -> list[int]:
    """Into `directory` (the run's snapshot folder, which holds none of them), the replicated store's newest snapshot
    of each of the run's fragments in `owned` (None: all); the fragments fetched (none without a replicated store)."""
    store = await SnapshotStore.of(bus)
    if store is None:
        return []
    fetched = []
    for p in await store.fragments(run_id):
        if (owned is None or p in owned) and await store.get(run_id, p, snapshot.path_of(directory, p)) is not None:
            fetched.append(p)
    if fetched:
        log.info("run %s: fetched fragments %s from the replicated snapshot store", run_id, fetched)
    return fetched
