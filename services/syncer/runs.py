"""The syncer's control-plane state: which runs exist, their sync recipe, announced learners, and their final cut.

Pure fold over events; `decide` asks for a final cut once per run and shard (level-triggered: after a
restart a requested but unfinished cut is taken again). The runs fold the same on every shard (each
shard's FinalCutDone is kept), so one snapshot serves them all: `dump`/`load` are its codec (JSON, exact
round trip), and `load` is told the shard of the instance that resumes from it. IslandUp / IslandReplaced
announce the learner generations the data plane admits (roster.py), with their ranks; the island ends
(schemas/fleet.py's ISLAND_ENDS) say a generation is gone (IslandReplaced, that its predecessor is): it stops
counting as live at once (liveness.py), and a replacement counts again from its first chunk.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from yeto.schemas.base import Event, Message, parse, to_bytes
from yeto.schemas.final import FinalCutDone, FinalCutRequested
from yeto.schemas.fleet import ISLAND_ENDS, IslandEvent, IslandReplaced, IslandUp, RunLaunched, learner_name
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.shape import shape_version


@dataclass(frozen=True)
class RunInfo:
    sync: dict[str, Any]                                       # the sync settings the recipe gave (SyncConfig.from_dict)
    cut_requested: FinalCutRequested | None = None
    cuts_done: frozenset[tuple[int, int]] = frozenset()      # (K, N) of the shards that reported FinalCutDone
    generations: dict[str, int] = field(default_factory=dict)  # learner id -> newest generation the launcher announced
    ranks: dict[str, int] = field(default_factory=dict)        # learner id -> ranks of its island (nodes x count)
    tokens_per_step: int = 0                                   # token slots of one rank per inner step (the recipe's)
    gone: dict[str, int] = field(default_factory=dict)         # learner id -> newest generation the launcher saw end


@dataclass(frozen=True)
class SyncerState:
    runs: dict[str, RunInfo] = field(default_factory=dict)
    shard: tuple[int, int] = (0, 1)          # this instance's K/N: only its own FinalCutDone ends its cut

    def cut_done(self, run_id: str) -> bool:
        return self.shard in self.runs[run_id].cuts_done


@dataclass(frozen=True)
class FinalCut:
    """Intent: stop rounds of this run, merge what is in, snapshot, broadcast f32 keyframes, report."""

    request: FinalCutRequested


def evolve(state: SyncerState, event: Event) -> SyncerState:
    runs = state.runs
    if isinstance(event, RunLaunched):
        train = _recipe(event.recipe).train
        runs = {**runs, event.run_id: RunInfo(sync=train.sync.model_dump(exclude_unset=True),
                                              tokens_per_step=train.tokens_per_step)}
    elif isinstance(event, (IslandUp, IslandReplaced)) and event.run_id in runs:
        info, name = runs[event.run_id], learner_name(event.island)
        if event.generation < info.generations.get(name, -1):
            return state
        spec = _dict(event.spec)
        ranks = _positive(spec.get("count"), 1) * _positive(spec.get("nodes"), 1)
        gone = info.gone                # a replacement up means its predecessors are over, whatever else was said
        if isinstance(event, IslandReplaced) and event.previous_generation > gone.get(name, -1):
            gone = {**gone, name: event.previous_generation}
        runs = {**runs, event.run_id: replace(info, generations={**info.generations, name: event.generation},
                                              ranks={**info.ranks, name: ranks}, gone=gone)}
    elif isinstance(event, IslandEvent) and event.type in ISLAND_ENDS and event.run_id in runs:
        info, name = runs[event.run_id], learner_name(event.island)
        if event.generation <= info.gone.get(name, -1):
            return state
        runs = {**runs, event.run_id: replace(info, gone={**info.gone, name: event.generation})}
    elif isinstance(event, FinalCutRequested) and event.run_id in runs:
        runs = {**runs, event.run_id: replace(runs[event.run_id], cut_requested=runs[event.run_id].cut_requested or event)}
    elif isinstance(event, FinalCutDone) and event.run_id in runs:
        info = runs[event.run_id]
        runs = {**runs, event.run_id: replace(info, cuts_done=info.cuts_done | {(event.shard, event.num_shards)})}
    else:
        return state
    return replace(state, runs=runs)


def decide(state: SyncerState, msg: Message | None, now: object) -> list[FinalCut]:
    if msg is not None and not isinstance(msg, FinalCutRequested):
        return []
    return [FinalCut(info.cut_requested) for run_id, info in state.runs.items()
            if info.cut_requested and not state.cut_done(run_id)]


CODEC_VERSION = shape_version(SyncerState)   # another shape's snapshot is ignored (full replay)


def dump(state: SyncerState) -> bytes:
    """The runs, not the shard: that is the resuming instance's own (its --shard)."""
    runs = {run_id: {"sync": info.sync, "cuts_done": sorted(info.cuts_done), "generations": info.generations,
                     "ranks": info.ranks, "tokens_per_step": info.tokens_per_step, "gone": info.gone,
                     "cut_requested": json.loads(to_bytes(info.cut_requested)) if info.cut_requested else None}
            for run_id, info in state.runs.items()}
    return json.dumps({"runs": runs}, sort_keys=True).encode()


def load(data: bytes, shard: tuple[int, int] = (0, 1)) -> SyncerState:
    runs = {run_id: RunInfo(sync=info["sync"], cuts_done=frozenset((k, n) for k, n in info["cuts_done"]),
                            cut_requested=_request(info["cut_requested"]), generations=info["generations"],
                            ranks=info["ranks"], tokens_per_step=info["tokens_per_step"], gone=info["gone"])
            for run_id, info in json.loads(data)["runs"].items()}
    return SyncerState(runs=runs, shard=shard)


def _request(raw: dict[str, Any] | None) -> FinalCutRequested | None:
    msg = None if raw is None else parse(raw)
    if msg is not None and not isinstance(msg, FinalCutRequested):
        raise ValueError(f"a syncer snapshot holds a {msg.type} where a FinalCutRequested belongs")
    return msg


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _positive(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _recipe(raw: object) -> LaunchRecipe:
    """The run's recipe; its defaults where one bypassed parsing (a parsed recipe always upcasts)."""
    try:
        return LaunchRecipe.upcast(raw)
    except ValueError:
        return LaunchRecipe()
