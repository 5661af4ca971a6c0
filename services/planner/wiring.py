"""Wiring of the planner service: PlanFleet in, FleetPlanned or FleetPlanFailed out; a refusal in, MoveIsland or ReplanFailed.

An island a cloud refused at launch (OfferRefused) is answered with MoveIsland to the next-best offer within the run's
budget (replan.py: its GPU shape elsewhere first, else another that holds the model; the bounds from the run's
RunLaunched and IslandRequested events, move_budget.py), or with ReplanFailed (why none is, what to change).

The catalog is read through SkyPilot (a child process, seconds) once per catalog directory (and, for a re-plan, the
refused cloud alone) and kept; live signals are gathered per command (they carry their own TTL cache under the state
dir).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from yeto.infra.runner import Context, ServiceSpec
from yeto.schemas.base import SYSTEM_RUN, derive_id
from yeto.schemas.commands import PlanFleet
from yeto.schemas.fleet import IslandReplaced, IslandRequested, IslandUp, RunLaunched
from yeto.schemas.offers import MoveIsland, OfferRefused, ReplanFailed
from yeto.schemas.subjects import event_subject
from yeto.services.planner.api import load_catalog, shape_fleet
from yeto.services.planner.catalog import CatalogUnavailable
from yeto.services.planner.logic import handle
from yeto.services.planner.move_budget import RunBounds, bounds_of, requested
from yeto.services.planner.refusals import KEEP, active, with_refusals
from yeto.services.planner.replan import Unplaceable, replacement
from yeto.services.planner.signals import Signals, gather_signals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """Intent: plan the fleet this command asks for."""

    cmd: PlanFleet


@dataclass(frozen=True)
class Move:
    """Intent: find the next-best offer for the island a cloud refused, and ask the launcher to start it there."""

    refused: OfferRefused


@dataclass(frozen=True)
class State:
    """The newest refusals, and the (run, island, generation) after which a refusal needs no answer: a next
    generation was requested, or that generation came up after all; `unplaced`: those whose ReplanFailed is out;
    `runs`: each run's budget bounds (move_budget.py; none for a run launched before they were recorded)."""

    refused: tuple[OfferRefused, ...] = ()
    answered: frozenset[tuple[str, int, int]] = frozenset()
    unplaced: frozenset[str] = frozenset()      # OfferRefused ids
    runs: tuple[tuple[str, RunBounds], ...] = ()

    def bounds(self, run_id: str) -> RunBounds | None:
        return next((b for rid, b in self.runs if rid == run_id), None)


def unanswered(state: State, now: datetime) -> list[OfferRefused]:
    """Refusals of a run's island whose next generation was never requested, within their cool-down."""
    return [r for r in active(state.refused, now)
            if r.run_id != SYSTEM_RUN and (r.run_id, r.island, r.generation) not in state.answered]


def decide(state: State, msg, now: datetime) -> list:
    """Level-triggered: a refusal the planner missed (it was down, or still catching up) is answered on a tick."""
    if isinstance(msg, PlanFleet):
        return [Plan(msg)]
    if msg is None or isinstance(msg, OfferRefused):
        return [Move(r) for r in unanswered(state, now) if msg is None or r.id == msg.id]
    return []


def move_island(r: OfferRefused, catalog: list, signals: Signals,
                bounds: RunBounds | None = None) -> MoveIsland | ReplanFailed:
    """The MoveIsland answering one refusal, or the ReplanFailed saying why no offer can take its place."""
    got = replacement(r, catalog, signals, bounds)
    if isinstance(got, Unplaceable):
        return ReplanFailed(id=derive_id(r.run_id, "ReplanFailed", r.island, r.generation), run_id=r.run_id,
                            source="planner", causation_id=r.id, island=r.island, generation=r.generation,
                            refused=r.id, reason=got.reason, advice=got.advice)
    o, nodes = got.offering, got.nodes or r.nodes
    changed = [what for what, same in (("cloud", o.cloud == r.cloud), ("region", o.region == r.region),
                                       ("GPU type", o.gpu == r.gpu), ("GPUs", (o.count, nodes) == (r.count, r.nodes)))
               if not same]
    bound = (bounds.describe(r.island, got.price) if bounds is not None else
             f"at most the refused ${r.price_per_hour:.2f}/hr + 10% (the run recorded no budget)")
    reason = (f"{r.cloud}:{r.nodes}x{r.count}x{r.gpu.lower()}@{r.region or '*'} refused ({r.cause}); next-best offer "
              f"{o.cloud}:{nodes}x{o.count}x{o.gpu.lower()}@{o.region} ({o.instance_type}) at ${got.price:.2f}/hr, "
              f"another {', '.join(changed)}; {bound}")
    return MoveIsland(id=derive_id(r.run_id, "MoveIsland", r.island, r.generation + 1), run_id=r.run_id,
                      source="planner", causation_id=r.id, island=r.island, generation=r.generation + 1,
                      spec=got.spec(r.nodes), price_per_hour=round(got.price, 4), refused=r.id, reason=reason)


def evolve(state: State, event) -> State:
    """The newest OfferRefused events (the launcher's record of a cloud's "no"; plans avoid them for their cool-down)
    and which island generations are past answering (a later one requested, or this one up)."""
    if isinstance(event, OfferRefused):
        return replace(state, refused=(*state.refused, event)[-KEEP:])
    if isinstance(event, ReplanFailed):
        return replace(state, unplaced=state.unplaced | {event.refused})
    if isinstance(event, RunLaunched) and (b := bounds_of(event)) is not None:
        return replace(state, runs=(*[(rid, x) for rid, x in state.runs if rid != event.run_id], (event.run_id, b))[-KEEP:])
    if isinstance(event, IslandRequested):
        b = state.bounds(event.run_id)
        runs = state.runs if b is None else tuple((rid, requested(x, event) if rid == event.run_id else x)
                                                  for rid, x in state.runs)
        answered = state.answered | {(event.run_id, event.island, event.generation - 1)} if event.generation else state.answered
        return replace(state, runs=runs, answered=answered)
    if isinstance(event, (IslandUp, IslandReplaced)):
        return replace(state, answered=state.answered | {(event.run_id, event.island, event.generation)})
    return state


def build(args, *, tick_s: float = 15.0) -> ServiceSpec:
    state_dir: Path = args.settings.state_dir
    catalogs: dict[tuple[str | None, tuple[str, ...]], list] = {}

    cache = state_dir / "cache" / "signals.json"

    def catalog_of(catalog_dir: str | None, clouds: tuple[str, ...] = ()) -> list:
        """`clouds` () = every cloud; a re-plan reads only the refused one's (the others' need not download), or
        takes it from every cloud's, read already."""
        where = catalog_dir or os.environ.get("YETO_CATALOG_DIR")
        if (where, ()) in catalogs:
            return [o for o in catalogs[(where, ())] if not clouds or o.cloud in clouds]
        if (where, clouds) not in catalogs:
            catalogs[(where, clouds)] = load_catalog(catalog_dir=where, clouds=list(clouds) or None)
        return catalogs[(where, clouds)]

    def plan_blocking(cmd: PlanFleet, refused: tuple[OfferRefused, ...]):
        catalog = catalog_of(cmd.request.get("catalog_dir"))
        return handle(cmd, lambda req: shape_fleet(req, catalog, cache_path=cache, now=time.time(), refusals=refused))

    def move_catalog(r: OfferRefused, bounds: RunBounds | None) -> list:
        """The refused cloud's catalog (a run with no bounds), the run's clouds', or every cloud's; a catalog that
        cannot be read leaves the refused cloud's."""
        clouds = (r.cloud,) if bounds is None else tuple(sorted({r.cloud, *bounds.clouds})) if bounds.clouds else ()
        try:
            return catalog_of(None, clouds)
        except CatalogUnavailable as e:
            log.warning("planner: catalog of %s unavailable (%s); the move looks at %s only", clouds or "every cloud",
                        e, r.cloud)
            return catalog_of(None, (r.cloud,))

    def move_blocking(r: OfferRefused, state: State) -> list:
        now = time.time()
        bounds = state.bounds(r.run_id)
        catalog = move_catalog(r, bounds)
        signals = with_refusals(gather_signals(sorted({o.cloud for o in catalog} | {r.cloud}), cache_path=cache, now=now),
                                state.refused, datetime.fromtimestamp(now, timezone.utc))
        got = move_island(r, catalog, signals, bounds)
        if isinstance(got, MoveIsland):
            return [got]
        if r.id in state.unplaced:     # asked again on every tick until the cool-down ends: said once, on the tape
            return []
        log.warning("planner: island %d of run %s stays refused: %s", r.island, r.run_id, got.reason)
        return [got]

    async def act(intent: Plan | Move, ctx: Context):
        refused = ctx.state.refused
        if isinstance(intent, Move):
            return await asyncio.to_thread(move_blocking, intent.refused, ctx.state)
        return [await asyncio.to_thread(plan_blocking, intent.cmd, refused)]

    return ServiceSpec(name="planner", initial=State, evolve=evolve, decide=decide, act=act, tick_s=tick_s,
                       event_subjects=(event_subject(SYSTEM_RUN, "ServiceStarted"), event_subject("*", "OfferRefused"),
                                       *(event_subject("*", t) for t in ("RunLaunched", "IslandRequested", "IslandUp",
                                                                          "IslandReplaced", "ReplanFailed"))))
