"""Offers a cloud refused at launch, as a run's tape tells them, and where each refused island moved.

Which island a cloud refused (cloud, region, type, cause, reason, when: OfferRefused), and where its next generation
was requested instead (the launcher's IslandRequested answering the planner's MoveIsland, schemas/offers.py).
MoveIsland is a command and never lands on the tape; the move is the next generation's IslandRequested on another
offer. When no offer can take its place, the planner's ReplanFailed says why and what to change. Pure: run_view.py
folds it, `yeto status RUN` prints it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from yeto.schemas.fleet import IslandRequested
from yeto.schemas.offers import OfferRefused, ReplanFailed


@dataclass(frozen=True)
class Refusal:
    island: int
    generation: int
    """The generation the cloud refused."""
    cloud: str
    region: str
    gpu: str
    count: int
    instance_type: str
    cause: str
    """capacity | quota"""
    reason: str
    """The cloud's words (untrusted text: print it through `printable`)."""
    at: datetime
    moved_to: dict[str, Any] | None = None
    """The spec of the next generation, when it was requested on another offer."""
    moved_at: datetime | None = None
    moved_generation: int = 0
    moved_why: str = ""
    """The planner's words for the move (IslandRequested.reason): what changed and the budget it keeps."""
    unplaced: str = ""
    """Why no offer could take its place and what to change (the planner's ReplanFailed), while it is not moved."""


def fold_refusal(refusals: tuple[Refusal, ...], e: Any) -> tuple[Refusal, ...]:
    """The refusals after one more event: an OfferRefused adds one (once per island generation), a later generation's
    IslandRequested on another offer marks the island's pending refusals as moved there, a ReplanFailed records why
    no offer could take its place."""
    if isinstance(e, OfferRefused):
        if any((r.island, r.generation) == (e.island, e.generation) for r in refusals):
            return refusals
        return (*refusals, Refusal(e.island, e.generation, e.cloud, e.region, e.gpu, e.count, e.instance_type,
                                   e.cause, e.reason, e.ts))
    if isinstance(e, ReplanFailed):
        return tuple(replace(r, unplaced=f"{e.reason}; {e.advice}") if (r.island, r.generation) == (e.island, e.generation)
                     else r for r in refusals)
    if isinstance(e, IslandRequested):
        where = (e.spec.get("cloud"), e.spec.get("region"), e.spec.get("gpu"), e.spec.get("count"))
        return tuple(replace(r, moved_to=dict(e.spec), moved_at=e.ts, moved_generation=e.generation, moved_why=e.reason)
                     if r.island == e.island and r.moved_to is None and e.generation > r.generation
                     and where != (r.cloud, r.region, r.gpu, r.count) else r for r in refusals)
    return refusals


def printable(text: str, limit: int = 160) -> str:
    """A cloud's words fit for a terminal: control characters become spaces, cut to `limit` characters."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _where(cloud: Any, region: Any, count: Any, gpu: Any) -> str:
    return f"{cloud} {region or '(any region)'} {count}x{gpu}"


def refusal_lines(refusals: tuple[Refusal, ...]) -> list[str]:
    """Two lines per refusal for `yeto status RUN`: what was refused, why and when; where the island went."""
    lines = []
    for r in refusals:
        kind = _where(r.cloud, r.region, r.count, r.gpu) + (f" ({r.instance_type})" if r.instance_type else "")
        lines.append(f"    island {r.island} gen {r.generation}: {kind} refused ({r.cause}) "
                     f"at {r.at:%Y-%m-%d %H:%M:%S}: {printable(r.reason)}")
        s = r.moved_to
        if s is None and r.unplaced:
            lines.append(f"      no offer can take its place: {printable(r.unplaced, 700)}.")
            continue
        if s is None:
            lines.append("      not moved yet: the planner moves it to the next-best offer (another region or cloud, "
                         "or another GPU type or count that holds the model at its TFLOPs) within the run's budget, "
                         "or says here why none is left")
            continue
        price = f", ${float(s['price_per_hour']):.2f}/hr" if s.get("price_per_hour") else ""
        lines.append(f"      moved to {_where(s.get('cloud'), s.get('region'), s.get('count'), s.get('gpu'))} "
                     f"as gen {r.moved_generation} at {r.moved_at:%Y-%m-%d %H:%M:%S}{price}")
        if r.moved_why:     # the planner's sentence: the bound is the run's, the text is ours (printable all the same)
            lines.append(f"      {printable(r.moved_why.split('; ', 1)[-1], 300)}")
    return lines
