"""When a fragment's round merges: pending pushes, quorum and the adaptive grace deadline, time passed in.

A Round folds admitted pushes; `decide` returns an intent: MergeNow, WakeAt (check again at a time),
or None (keep waiting for pushes). Nothing here touches arrays, clocks or the network.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.grace import grace_s, quorum_size


@dataclass(frozen=True)
class PendingPush:
    header: FragmentHeader
    slot: int                       # the row of the fragment's push buffer holding its decoded values
    arrived: float


@dataclass(frozen=True)
class MergeNow:
    fragment: int
    pushes: tuple[PendingPush, ...]
    grace_ms: float
    quorum_ms: float


@dataclass(frozen=True)
class WakeAt:
    fragment: int
    at: float


@dataclass
class Round:
    """One fragment's open round: the newest admitted push per learner, and its quorum timing."""

    fragment: int
    version: int = 0
    pending: dict[str, PendingPush] = field(default_factory=dict)
    first_push_at: float | None = None
    quorum_at: float | None = None
    quorum_s: float = 0.0
    grace_s: float = 0.0
    last_sync_s: float = 0.0

    def add(self, header: FragmentHeader, now: float) -> PendingPush:
        """Admit a push; a newer push of the same learner supersedes its pending one (same row)."""
        old = self.pending.get(header.learner)
        slot = old.slot if old is not None else len(self.pending)
        push = self.pending[header.learner] = PendingPush(header, slot, now)
        if self.first_push_at is None:
            self.first_push_at = now
        return push

    def close(self, *, merged: bool, sync_s: float) -> None:
        """End the round (merged or aborted): the next push opens a new one."""
        self.pending.clear()
        self.first_push_at = self.quorum_at = None
        self.last_sync_s = sync_s
        if merged:
            self.version += 1


def decide(r: Round, *, live: set[str], slowest_step_s: float, now: float, config: SyncConfig) -> MergeNow | WakeAt | None:
    """Merge once quorum is in and the grace window has passed, or at once when every live learner pushed.

    Quorum counts the pushes of live learners only: the push of a learner gone since (its last one, sent as it
    finished, or one before a crash) waits for a live learner's push of the fragment and merges with it, not alone
    (the final cut merges it when nobody live pushes again)."""
    if not r.pending:
        return None
    if r.quorum_at is None:
        if len(live.intersection(r.pending)) < quorum_size(len(live), config.quorum):
            return None
        r.quorum_at = now
        r.quorum_s = now - (r.first_push_at if r.first_push_at is not None else now)
        r.grace_s = grace_s(slowest_step_s=slowest_step_s, quorum_s=r.quorum_s, sync_s=r.last_sync_s, gamma=config.grace_gamma,
                            tau_steps=config.grace_tau_steps, grace_max_s=config.grace_max_s)
    deadline = r.quorum_at + r.grace_s
    if now >= deadline or (live and live <= r.pending.keys()):
        pushes = tuple(sorted(r.pending.values(), key=lambda p: p.slot))
        return MergeNow(r.fragment, pushes, grace_ms=1e3 * min(r.grace_s, now - r.quorum_at), quorum_ms=1e3 * r.quorum_s)
    return WakeAt(r.fragment, deadline)
