"""Projections: pure folds over events. `RunView` (phase, islands, rounds, loss, spend) backs `yeto status`.

Events are matched by their `type` string and read field by field from either a parsed model or a
plain payload dict, so a fold works on tape rows of any event type, known to this Yeto or not.
Spend is Σ price_per_hour × uptime, uptime running from IslandUp / IslandReplaced to the island's next
IslandExited / IslandPreempted / IslandDropped / IslandStopped (or the run's end), measured between
event timestamps (schemas/fleet.py states the same rule): the fold never
reads a clock; `spend_at(view, now)` adds the open intervals up to a time the caller passes in.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterable

ISLAND_UP = {"IslandUp": "up", "IslandReplaced": "up"}   # a replacement is billed from when it is reported
ISLAND_DOWN = {"IslandExited": "exited", "IslandPreempted": "preempted", "IslandDropped": "dropped",
               "IslandStopped": "stopped"}
RUN_END = {"RunFinalized": "finalized", "RunFailed": "failed", "RunStopped": "stopped"}
FINALIZING = ("FinalCutRequested", "BudgetExhausted", "FinalCutDone", "CheckpointMarkedFinal", "ArtifactWritten")


def get(event: Any, name: str, default: Any = None) -> Any:
    """A field of an event model or payload dict, or `default` when it does not carry it."""
    value = event.get(name) if isinstance(event, dict) else getattr(event, name, None)
    return default if value is None else value


def timestamp(event: Any) -> datetime | None:
    ts = get(event, "ts")
    return datetime.fromisoformat(ts) if isinstance(ts, str) else ts


@dataclass(frozen=True)
class IslandView:
    island: str
    status: str = "requested"
    price_per_hour: float = 0.0
    up_since: datetime | None = None
    """Start of the open billing interval, None while the island is not up."""
    closed_usd: float = 0.0
    """Spend of the closed intervals."""
    uptime_s: float = 0.0
    """Uptime of the closed intervals."""

    def spend_at(self, until: datetime | None) -> float:
        open_s = (until - self.up_since).total_seconds() if self.up_since and until else 0.0
        return self.closed_usd + self.price_per_hour * max(0.0, open_s) / 3600.0

    def uptime_at(self, until: datetime | None) -> float:
        return self.uptime_s + (max(0.0, (until - self.up_since).total_seconds()) if self.up_since and until else 0.0)

    def down(self, ts: datetime | None, status: str) -> "IslandView":
        if self.up_since is None or ts is None:
            return replace(self, status=status, up_since=None)
        secs = max(0.0, (ts - self.up_since).total_seconds())
        return replace(self, status=status, up_since=None, uptime_s=self.uptime_s + secs,
                       closed_usd=self.closed_usd + self.price_per_hour * secs / 3600.0)


@dataclass(frozen=True)
class RunView:
    run_id: str
    phase: str = "launching"
    """launching | running | finalizing | finalized | failed | stopped"""
    reason: str = ""
    started: datetime | None = None
    finished: datetime | None = None
    last_ts: datetime | None = None
    last_seq: int = 0
    num_events: int = 0
    max_steps: int | None = None
    islands: dict[str, IslandView] = field(default_factory=dict)
    rounds_merged: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    """Latest merged version per fragment."""
    losses: dict[str, float] = field(default_factory=dict)
    """Last reported loss per learner."""
    steps: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    """Last reported token count per learner (counted since that learner generation started)."""
    generations: dict[str, int] = field(default_factory=dict)
    retired_tokens: int = 0
    """Tokens of learner generations that were replaced."""

    @property
    def spend_usd(self) -> float:
        """Spend up to the last event seen."""
        return spend_at(self, self.last_ts)

    @property
    def num_tokens(self) -> int:
        return self.retired_tokens + sum(self.tokens.values())


def spend_at(view: RunView, now: datetime | None) -> float:
    """Spend of closed intervals plus the open ones up to `now` (capped at the run's end)."""
    until = view.finished or now
    return sum(isl.spend_at(until) for isl in view.islands.values())


def _island(view: RunView, event: Any, type_: str, ts: datetime | None) -> dict[str, IslandView]:
    key = str(get(event, "island", "?"))
    isl = view.islands.get(key, IslandView(island=key))
    price = float(get(event, "price_per_hour", isl.price_per_hour))
    if type_ in ISLAND_UP:
        isl = replace(isl.down(ts, "up"), status="up", price_per_hour=price, up_since=ts)
    elif type_ in ISLAND_DOWN:
        isl = replace(isl.down(ts, ISLAND_DOWN[type_]), price_per_hour=price)
    elif type_ == "IslandRequested":
        isl = replace(isl, status="requested", price_per_hour=price)
    return {**view.islands, key: isl}


def _max_steps(recipe: Any) -> int | None:
    """max_steps from a RunLaunched recipe: its limits, its train recipe, or the top level."""
    if not isinstance(recipe, dict):
        return None
    for part in (recipe.get("limits"), recipe.get("train"), recipe):
        if isinstance(part, dict) and part.get("max_steps") is not None:
            return int(part["max_steps"])
    return None


def _progress(v: RunView, event: Any) -> RunView:
    who = str(get(event, "learner", "?"))
    gen, retired = int(get(event, "generation", 0)), v.retired_tokens
    if gen > v.generations.get(who, gen):  # a new generation counts its tokens from zero again
        retired += v.tokens.get(who, 0)
    updates = {name: {**getattr(v, name), who: cast(get(event, key))}
               for name, key, cast in (("losses", "loss", float), ("steps", "step", int), ("tokens", "tokens", int))
               if get(event, key) is not None}
    return replace(v, **updates, generations={**v.generations, who: max(gen, v.generations.get(who, gen))},
                   retired_tokens=retired, phase="running" if v.phase == "launching" else v.phase)


def fold(view: RunView | None, event: Any, seq: int = 0) -> RunView:
    """The run's view after one more event. `view` None starts a new run from this event."""
    type_, ts = get(event, "type", ""), timestamp(event)
    v = view or RunView(run_id=get(event, "run_id", "_"), started=ts)
    v = replace(v, last_ts=ts or v.last_ts, last_seq=seq or v.last_seq, num_events=v.num_events + 1)
    done = v.phase in RUN_END.values()
    if type_ == "RunLaunched":
        return replace(v, started=v.started or ts, max_steps=_max_steps(get(event, "recipe", {})) or v.max_steps)
    if type_.startswith("Island"):
        v = replace(v, islands=_island(v, event, type_, ts))
        return replace(v, phase="running") if type_ in ISLAND_UP and v.phase == "launching" else v
    if type_ == "RoundMerged":
        frag = str(get(event, "fragment", "?"))
        versions = {**v.versions, frag: int(get(event, "global_version", v.versions.get(frag, 0)))}
        return replace(v, rounds_merged=v.rounds_merged + 1, versions=versions,
                       phase="running" if v.phase == "launching" else v.phase)
    if type_ == "LearnerProgress":
        return _progress(v, event)
    if type_ in FINALIZING and not done:
        return replace(v, phase="finalizing", reason=str(get(event, "reason", v.reason or type_)))
    if type_ in RUN_END and not done:
        islands = {k: i.down(ts, i.status if i.up_since is None else "stopped") for k, i in v.islands.items()}
        return replace(v, phase=RUN_END[type_], finished=ts, islands=islands, reason=str(get(event, "reason", v.reason)))
    return v


def as_event(payload: Any) -> Any:
    """A tape payload as its model when this Yeto knows the type (old versions upcast), else the dict itself."""
    from yeto.schemas import SchemaError, parse

    try:
        return parse(payload)
    except SchemaError:
        return payload


def replay(events: Iterable[tuple[int, Any]]) -> list[tuple[int, RunView]]:
    """The state after each (seq, event) of one run: the timeline `yeto tape replay` prints."""
    timeline, view = [], None
    for seq, event in events:
        view = fold(view, event, seq)
        timeline.append((seq, view))
    return timeline
