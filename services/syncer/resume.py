"""Snapshot of one fragment of a SyncerCore, and resuming a core from snapshots (the files: snapshot.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from yeto.services.syncer import backend, merge
from yeto.services.syncer.admission import LearnerRecord
from yeto.services.syncer.logic import Round
from yeto.services.syncer.snapshot import FragmentSnapshot

if TYPE_CHECKING:
    from yeto.services.syncer.core import SyncerCore


def snapshot_of(core: SyncerCore, p: int) -> FragmentSnapshot:
    """Fragment p's state as of now: theta, momentum, the broadcast shadow, version and learner ledger."""
    ledger = {name: {"generation": rec.generation, "last_step": rec.last_step.get(p, -1),
                     "credited_to": rec.credited_to.get(p, 0)} for name, rec in core.learners.items()}
    frag = core.frags[p]
    return FragmentSnapshot(fragment=p, version=core.rounds[p].version, fingerprint=core.fingerprint,
                            theta=backend.to_host(frag.theta).copy(), momentum=backend.to_host(frag.momentum).copy(),
                            shadow=core.broadcast.shadows[p].copy(), role=core.roles[p], ledger=ledger)


def restore(core: SyncerCore, snaps: dict[int, FragmentSnapshot], now: float) -> None:
    """Load snapshots into `core`; ledger learners count as live (last seen `now`) until they time out."""
    for p, s in sorted(snaps.items()):
        core.fingerprint = core.fingerprint or s.fingerprint
        if s.fingerprint != core.fingerprint:
            raise ValueError(f"snapshot of fragment {p} has another layout fingerprint; it belongs to another run or layout")
        core.frags[p], core.roles[p] = merge.FragmentRows(s.theta, s.momentum), s.role
        core.rounds[p] = Round(p, version=s.version)
        core.ensure_broadcast().restore(p, s.version, s.shadow)
        for name, entry in s.ledger.items():
            rec = core.learners.get(name)
            if rec is None or entry["generation"] > rec.generation:
                rec = core.learners[name] = LearnerRecord(generation=entry["generation"], last_seen=now)
            if entry["generation"] == rec.generation and entry["last_step"] >= 0:
                rec.last_step[p] = entry["last_step"]
            if entry["generation"] == rec.generation and entry.get("credited_to"):
                rec.credited_to[p] = entry["credited_to"]
