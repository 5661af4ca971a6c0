"""The finalizer's projection of a run (pure fold): meters, progress, island ends, and the final-cut state machine.

Phases: training -> cutting (FinalCutRequested) -> done (FinalCutDone of every syncer shard) -> marked (CheckpointMarkedFinal)
-> written (ArtifactWritten) -> finalized; or failed / stopped from any phase before finalized.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from yeto.schemas.base import Event
from yeto.schemas.fleet import (IslandDropped, IslandExited, IslandPreempted, IslandReplaced, IslandStopped, IslandUp,
                                RunLaunched, learner_name)
from yeto.schemas.final import (ArtifactWritten, CheckpointMarkedFinal, FinalCutDone, FinalCutRequested,
                                LearnerFinalAck, RunFailed, RunFinalized, RunStopped)
from yeto.schemas.training import LearnerProgress
from yeto.services.finalizer.budget import Meter

ENDED = ("finalized", "failed", "stopped")


@dataclass(frozen=True)
class FinalRun:
    run_id: str
    fleet: tuple[dict[str, Any], ...]
    recipe: dict[str, Any]
    launched_at: datetime
    meters: tuple[Meter, ...]
    generations: tuple[int, ...]
    islands: tuple[str, ...]                    # up | down | finished | dropped (per island)
    tokens: dict[tuple[str, int], int] = field(default_factory=dict)   # (learner, generation) -> tokens so far
    steps: dict[str, int] = field(default_factory=dict)                # learner -> highest step
    phase: str = "training"
    cut_reason: str = ""
    cut_at: datetime | None = None
    final: dict[str, Any] = field(default_factory=dict)                # versions, snapshot_path, sha256
    cut_parts: dict[int, dict[str, Any]] = field(default_factory=dict)  # syncer shard -> its FinalCutDone, until all are in
    marked_at: datetime | None = None
    acks: frozenset[str] = frozenset()
    artifact: dict[str, Any] = field(default_factory=dict)
    end_reason: str = ""

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())

    def expected_acks(self) -> set[str]:
        """Learners that can still acknowledge: islands up now (a finished or dead one never will)."""
        return {learner_name(i) for i, s in enumerate(self.islands) if s == "up"}


def _island(run: FinalRun, i: int, *, gen: int, status: str, meter: Meter) -> FinalRun:
    gens, stats, meters = list(run.generations), list(run.islands), list(run.meters)
    gens[i], stats[i], meters[i] = gen, status, meter
    return replace(run, generations=tuple(gens), islands=tuple(stats), meters=tuple(meters))


def _fold_island(run: FinalRun, e: Event) -> FinalRun:
    i = e.island
    if not 0 <= i < len(run.islands) or e.generation < run.generations[i]:
        return run
    m = run.meters[i]
    if isinstance(e, (IslandUp, IslandReplaced)):
        return _island(run, i, gen=e.generation, status="up", meter=m.start(e.ts, e.price_per_hour))
    if run.islands[i] in ("finished", "dropped") and not isinstance(e, IslandDropped):
        return _island(run, i, gen=e.generation, status=run.islands[i], meter=m.stop(e.ts))
    if isinstance(e, IslandExited) and e.exit_code == 0:
        return _island(run, i, gen=e.generation, status="finished", meter=m.stop(e.ts))
    status = "dropped" if isinstance(e, IslandDropped) else "down"
    return _island(run, i, gen=e.generation, status=status, meter=m.stop(e.ts))


def combine_cut(parts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One final cut from the shards' reports: every fragment's version, the snapshot folders, one digest."""
    ordered = [parts[k] for k in sorted(parts)]
    if len(ordered) == 1:
        return dict(ordered[0])
    paths = list(dict.fromkeys(part["snapshot_path"] for part in ordered))
    return dict(versions={p: v for part in ordered for p, v in part["versions"].items()}, snapshot_path=",".join(paths),
                sha256=hashlib.sha256("".join(part["sha256"] for part in ordered).encode()).hexdigest())


def evolve(state: dict[str, FinalRun], e: Event) -> dict[str, FinalRun]:
    if isinstance(e, RunLaunched):
        if e.run_id in state:
            return state
        n = len(e.fleet)
        return {**state, e.run_id: FinalRun(e.run_id, tuple(e.fleet), e.recipe, e.ts, (Meter(),) * n, (0,) * n, ("down",) * n)}
    run = state.get(e.run_id)
    if run is None or run.phase in ENDED and not isinstance(e, (IslandStopped, IslandExited, IslandDropped, IslandPreempted)):
        return state
    if isinstance(e, (IslandUp, IslandReplaced, IslandExited, IslandPreempted, IslandDropped, IslandStopped)):
        new = _fold_island(run, e)
    elif isinstance(e, LearnerProgress):
        new = replace(run, tokens={**run.tokens, (e.learner, e.generation): e.tokens},
                      steps={**run.steps, e.learner: max(e.step, run.steps.get(e.learner, 0))})
    elif isinstance(e, FinalCutRequested) and run.phase == "training":
        new = replace(run, phase="cutting", cut_reason=e.reason, cut_at=e.ts)
    elif isinstance(e, FinalCutDone) and run.phase in ("training", "cutting"):
        parts = {**run.cut_parts, e.shard: dict(versions=e.versions, snapshot_path=e.snapshot_path, sha256=e.sha256)}
        new = replace(run, cut_parts=parts)
        if len(parts) >= e.num_shards:
            new = replace(new, phase="done", final=combine_cut(parts), cut_reason=run.cut_reason or "user")
    elif isinstance(e, CheckpointMarkedFinal) and run.phase == "done":
        new = replace(run, phase="marked", marked_at=e.ts)
    elif isinstance(e, LearnerFinalAck):
        new = replace(run, acks=run.acks | {e.learner})
    elif isinstance(e, ArtifactWritten):
        new = replace(run, phase="written", artifact=dict(output=e.output, manifest_sha256=e.manifest_sha256))
    elif isinstance(e, (RunFinalized, RunFailed, RunStopped)):
        phase = {"RunFinalized": "finalized", "RunFailed": "failed", "RunStopped": "stopped"}[e.type]
        new = replace(run, phase=phase, end_reason=getattr(e, "reason", ""))
    else:
        return state
    return state if new is run else {**state, e.run_id: new}
