"""One island of a run as its events tell it: lifecycle phase, generation, heartbeat, crashes, and its meter.

Phases: requested -> up -> (exited -> preempted -> replacing -> up ...) | finished | dropped | stopped.
The phase follows the current generation only (news of an older one changes nothing); the meter
follows its own rule (schemas/spend.py), so billing never depends on the order of phase changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from yeto.schemas.fleet import (
    IslandDropped,
    IslandEvent,
    IslandExited,
    IslandPreempted,
    IslandReplaced,
    IslandRequested,
    IslandStopped,
    IslandUp,
)
from yeto.schemas.progress import LearnerBeat
from yeto.schemas.spend import Meter
from yeto.schemas.training import LearnerProgress

LIVE = ("requested", "up", "replacing")


@dataclass(frozen=True)
class Island:
    index: int
    spec: dict[str, Any]
    """The fleet entry: cloud, gpu, count, nodes, region, spot, price_per_hour."""
    generation: int = 0
    phase: str = "requested"
    since: datetime | None = None
    """When the current phase began (event time)."""
    handle: str = ""
    last_beat: datetime | None = None
    """Last LearnerProgress or LearnerBeat (an evaluation advancing) of the current generation."""
    beat_gap_s: float = 0.0
    """The longest interval between two LearnerProgress of the current generation: its pace (launcher/liveness.py). A
    LearnerBeat ends a silence too, so an evaluation's beats split what would be one long interval."""
    evaluated: bool = False
    """A LearnerProgress of the current generation carried a held-out loss: its pace includes an evaluation."""
    crashes: int = 0
    """Consecutive generations that died before any progress."""
    exit_detail: str = ""
    last_step: int = 0
    """The furthest step reported by any generation: where a replacement resumes."""
    meter: Meter = field(default_factory=Meter)

    @property
    def price_per_hour(self) -> float:
        return self.meter.price_per_hour

    @classmethod
    def launched(cls, index: int, spec: dict[str, Any], ts: datetime) -> Island:
        return cls(index=index, spec=spec, since=ts, meter=Meter(price_per_hour=float(spec.get("price_per_hour") or 0.0)))


def island_index(learner: str) -> int | None:
    """The island a learner id names (`island-<N>`), None for any other learner."""
    head, _, tail = learner.rpartition("-")
    return int(tail) if head == "island" and tail.isdigit() else None


def _phase(isl: Island, e: IslandEvent) -> Island:
    gen, ts, current = e.generation, e.ts, e.generation == isl.generation
    if gen < isl.generation:
        return isl
    if isinstance(e, IslandRequested):
        # the spec too: a generation may start on another offer, of another GPU shape even (MoveIsland, schemas/offers.py)
        return replace(isl, generation=gen, phase="requested" if gen == 0 else "replacing", since=ts, last_beat=None,
                       beat_gap_s=0.0, evaluated=False, spec=e.spec)
    if isinstance(e, (IslandUp, IslandReplaced)):
        return replace(isl, generation=gen, phase="up", since=ts, handle=e.handle)
    if isinstance(e, IslandExited) and current and isl.phase in LIVE:
        if e.exit_code == 0:
            return replace(isl, phase="finished", since=ts)
        crashed = isl.last_beat is None
        return replace(isl, phase="exited", since=ts, exit_detail=e.detail, crashes=isl.crashes + 1 if crashed else 0)
    if isinstance(e, IslandPreempted) and current and isl.phase not in ("dropped", "stopped", "finished"):
        return replace(isl, phase="preempted", since=ts)
    if isinstance(e, IslandDropped):
        return replace(isl, phase="dropped", since=ts)
    if isinstance(e, IslandStopped) and current and isl.phase in (*LIVE, "exited"):
        # a generation stopped while it was being started (the run ended meanwhile) ends too: else the launcher
        # would ask to stop it again once per de-duplication window; it never recorded a handle of its own
        return replace(isl, phase="stopped", since=ts, handle="" if isl.phase == "replacing" else isl.handle)
    return isl


def fold_island(isl: Island, e: IslandEvent, *, billing: bool) -> Island:
    """The island after one of its events; `billing` False once the run has ended (its meters are closed)."""
    new = _phase(isl, e)
    if billing:
        meter = isl.meter.apply(e.type, e.ts, e.price_per_hour, e.generation)
        if isinstance(e, IslandRequested) and meter.up_since is None and new.generation == e.generation:
            # the price its new generation is billed at once up: another offer's after a move (MoveIsland), shown
            # from the request on, not the refused offer's until the island is up; nothing is billed meanwhile
            meter = replace(meter, price_per_hour=e.price_per_hour)
        new = replace(new, meter=meter)
    return new


def beat(isl: Island, e: LearnerProgress | LearnerBeat) -> Island:
    """A heartbeat of the island's learner (its progress, or its evaluation advancing): counts only for the current
    generation. A LearnerBeat says the process works; only progress says how far it trained or that it evaluated."""
    if e.generation != isl.generation:
        return isl
    gap = (e.ts - isl.last_beat).total_seconds() if isl.last_beat is not None else 0.0
    isl = replace(isl, last_beat=e.ts, crashes=0, beat_gap_s=max(isl.beat_gap_s, gap))
    if isinstance(e, LearnerBeat):
        return isl
    return replace(isl, last_step=max(isl.last_step, e.step), evaluated=isl.evaluated or e.eval_loss is not None)
