"""Wiring of the planner service: a PlanFleet command in, a FleetPlanned or FleetPlanFailed event out.

The catalog is read through SkyPilot (a child process, seconds) once per catalog directory and kept;
live signals are gathered per command (they carry their own TTL cache under the state dir).
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
from yeto.schemas.fleet import IslandReplaced, IslandRequested, IslandUp
from yeto.schemas.offers import MoveIsland, OfferRefused
from yeto.schemas.subjects import event_subject
from yeto.services.planner.api import load_catalog, shape_fleet
from yeto.services.planner.logic import handle
from yeto.services.planner.refusals import KEEP, active, with_refusals
from yeto.services.planner.replan import replacement
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
    generation was requested, or that generation came up after all."""

    refused: tuple[OfferRefused, ...] = ()
    answered: frozenset[tuple[str, int, int]] = frozenset()


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


def move_island(r: OfferRefused, catalog: list, signals: Signals) -> MoveIsland | str:
    """The MoveIsland answering one refusal, or why no offer of the island's shape is left."""
    got = replacement(r, catalog, signals)
    if isinstance(got, str):
        return got
    o = got.offering
    reason = (f"{r.cloud}:{r.count}x{r.gpu.lower()}@{r.region or '*'} refused ({r.cause}); next-best offer "
              f"{o.cloud}:{r.count}x{o.gpu.lower()}@{o.region} ({o.instance_type}) at ${got.price:.2f}/hr")
    return MoveIsland(id=derive_id(r.run_id, "MoveIsland", r.island, r.generation + 1), run_id=r.run_id,
                      source="planner", causation_id=r.id, island=r.island, generation=r.generation + 1,
                      spec=got.spec(r.nodes), price_per_hour=round(got.price, 4), refused=r.id, reason=reason)


def evolve(state: State, event) -> State:
    """The newest OfferRefused events (the launcher's record of a cloud's "no"; plans avoid them for their cool-down)
    and which island generations are past answering (a later one requested, or this one up)."""
    if isinstance(event, OfferRefused):
        return replace(state, refused=(*state.refused, event)[-KEEP:])
    if isinstance(event, IslandRequested) and event.generation > 0:
        return replace(state, answered=state.answered | {(event.run_id, event.island, event.generation - 1)})
    if isinstance(event, (IslandUp, IslandReplaced)):
        return replace(state, answered=state.answered | {(event.run_id, event.island, event.generation)})
    return state


def build(args, *, tick_s: float = 15.0) -> ServiceSpec:
    state_dir: Path = args.settings.state_dir
    catalogs: dict[str | None, list] = {}

    cache = state_dir / "cache" / "signals.json"
    warned: set[str] = set()

    def catalog_of(catalog_dir: str | None) -> list:
        catalog_dir = catalog_dir or os.environ.get("YETO_CATALOG_DIR")
        if catalog_dir not in catalogs:
            catalogs[catalog_dir] = load_catalog(catalog_dir=catalog_dir)
        return catalogs[catalog_dir]

    def plan_blocking(cmd: PlanFleet, refused: tuple[OfferRefused, ...]):
        catalog = catalog_of(cmd.request.get("catalog_dir"))
        return handle(cmd, lambda req: shape_fleet(req, catalog, cache_path=cache, now=time.time(), refusals=refused))

    def move_blocking(r: OfferRefused, refused: tuple[OfferRefused, ...]) -> list:
        now = time.time()
        signals = with_refusals(gather_signals([r.cloud], cache_path=cache, now=now), refused,
                                datetime.fromtimestamp(now, timezone.utc))
        got = move_island(r, catalog_of(None), signals)
        if isinstance(got, MoveIsland):
            return [got]
        if r.id not in warned:     # asked again on every tick until the cool-down ends: said once
            warned.add(r.id)
            log.warning("planner: island %d of run %s stays refused: %s", r.island, r.run_id, got)
        return []

    async def act(intent: Plan | Move, ctx: Context):
        refused = ctx.state.refused
        if isinstance(intent, Move):
            return await asyncio.to_thread(move_blocking, intent.refused, refused)
        return [await asyncio.to_thread(plan_blocking, intent.cmd, refused)]

    return ServiceSpec(name="planner", initial=State, evolve=evolve, decide=decide, act=act, tick_s=tick_s,
                       event_subjects=(event_subject(SYSTEM_RUN, "ServiceStarted"), event_subject("*", "OfferRefused"),
                                       *(event_subject("*", t) for t in ("IslandRequested", "IslandUp", "IslandReplaced"))))
