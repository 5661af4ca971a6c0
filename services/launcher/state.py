"""The launcher's state: a pure fold of launch, island, heartbeat and end-of-run events into one record per run."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from yeto.schemas.base import Event
from yeto.schemas.fleet import (IslandDropped, IslandExited, IslandPreempted, IslandReplaced, IslandRequested,
                                IslandStopped, IslandUp, RunLaunched)
from yeto.schemas.final import RunFailed, RunFinalized, RunStopped, FinalCutRequested
from yeto.schemas.training import LearnerProgress

# Island phases: requested -> up -> (exited -> preempted -> replacing -> up ...) | finished | dropped | stopped
LIVE = ("requested", "up", "replacing")


@dataclass(frozen=True)
class Island:
    index: int
    spec: dict[str, Any]
    price_per_hour: float
    backend: str
    generation: int = 0
    phase: str = "requested"
    since: datetime | None = None       # when the current phase began (event time)
    handle: str = ""
    last_beat: datetime | None = None   # last LearnerProgress of the current generation
    crashes: int = 0                    # consecutive generations that died before any progress
    exit_detail: str = ""
    last_step: int = 0                  # the island's furthest reported step, any generation: where a replacement resumes


@dataclass(frozen=True)
class Run:
    run_id: str
    fleet: tuple[dict[str, Any], ...]
    recipe: dict[str, Any]
    launched_at: datetime
    islands: tuple[Island, ...]
    cutting: bool = False               # a final cut was requested: no more replacements
    ended: str = ""                     # RunFinalized | RunFailed | RunStopped once the run is over


def island_index(learner: str) -> int | None:
    head, _, tail = learner.rpartition("-")
    return int(tail) if head == "island" and tail.isdigit() else None


def _set(run: Run, i: int, **changes) -> Run:
    islands = list(run.islands)
    islands[i] = replace(islands[i], **changes)
    return replace(run, islands=tuple(islands))


def _fold_island(run: Run, e: Event) -> Run:
    if not 0 <= e.island < len(run.islands):
        return run
    isl = run.islands[e.island]
    if e.generation < isl.generation:          # news of an older generation changes nothing
        return run
    i, gen, ts = e.island, e.generation, e.ts
    if isinstance(e, IslandRequested):
        return _set(run, i, generation=gen, phase="requested" if gen == 0 else "replacing", since=ts, last_beat=None)
    if isinstance(e, (IslandUp, IslandReplaced)):
        return _set(run, i, generation=gen, phase="up", since=ts, handle=e.handle, price_per_hour=e.price_per_hour)
    if isinstance(e, IslandExited) and isl.phase in ("up", "requested", "replacing") and gen == isl.generation:
        if e.exit_code == 0:
            return _set(run, i, phase="finished", since=ts)
        crashed = isl.last_beat is None
        return _set(run, i, phase="exited", since=ts, exit_detail=e.detail,
                    crashes=isl.crashes + 1 if crashed else 0)
    if isinstance(e, IslandPreempted) and gen == isl.generation and isl.phase not in ("dropped", "stopped", "finished"):
        return _set(run, i, phase="preempted", since=ts)
    if isinstance(e, IslandDropped):
        return _set(run, i, phase="dropped", since=ts)
    if isinstance(e, IslandStopped) and gen == isl.generation and isl.phase in ("requested", "up", "exited"):
        return _set(run, i, phase="stopped", since=ts)
    return run


def evolve(state: dict[str, Run], event: Event) -> dict[str, Run]:
    """Fold one event; unknown runs and unrelated events leave the state unchanged."""
    if isinstance(event, RunLaunched):
        if event.run_id in state:
            return state
        islands = tuple(Island(index=i, spec=s, price_per_hour=float(s.get("price_per_hour") or 0.0),
                               backend=backend_of(s), since=event.ts) for i, s in enumerate(event.fleet))
        return {**state, event.run_id: Run(event.run_id, tuple(event.fleet), event.recipe, event.ts, islands)}
    run = state.get(event.run_id)
    if run is None:
        return state
    if isinstance(event, (IslandRequested, IslandUp, IslandExited, IslandPreempted, IslandReplaced, IslandDropped, IslandStopped)):
        new = _fold_island(run, event)
    elif isinstance(event, LearnerProgress):
        i = island_index(event.learner)
        ok = i is not None and i < len(run.islands) and run.islands[i].generation == event.generation
        new = _set(run, i, last_beat=event.ts, crashes=0, last_step=max(run.islands[i].last_step, event.step)) if ok else run
    elif isinstance(event, FinalCutRequested):
        new = replace(run, cutting=True)
    elif isinstance(event, (RunFinalized, RunFailed, RunStopped)):
        new = replace(run, ended=event.type)
    else:
        return state
    return state if new is run else {**state, event.run_id: new}


def backend_of(spec: dict[str, Any]) -> str:
    return "local" if spec.get("cloud") == "local" else "skypilot"
