"""Wiring of the planner service: a PlanFleet command in, a FleetPlanned or FleetPlanFailed event out.

The catalog is read through SkyPilot (a child process, seconds) once per catalog directory and kept;
live signals are gathered per command (they carry their own TTL cache under the state dir).
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from yeto.infra.runner import Context, ServiceSpec
from yeto.schemas.base import SYSTEM_RUN
from yeto.schemas.commands import PlanFleet
from yeto.schemas.offers import OfferRefused
from yeto.schemas.subjects import event_subject
from yeto.services.planner.api import load_catalog, shape_fleet
from yeto.services.planner.logic import handle
from yeto.services.planner.refusals import KEEP


@dataclass(frozen=True)
class Plan:
    """Intent: plan the fleet this command asks for."""

    cmd: PlanFleet


def decide(state, msg, now) -> list:
    return [Plan(msg)] if isinstance(msg, PlanFleet) else []


def evolve(state: tuple, event) -> tuple:
    """The newest OfferRefused events (the launcher's record of a cloud's "no"): plans avoid them for their cool-down."""
    return (*state, event)[-KEEP:] if isinstance(event, OfferRefused) else state


def build(args) -> ServiceSpec:
    state_dir: Path = args.settings.state_dir
    catalogs: dict[str | None, list] = {}

    def plan_blocking(cmd: PlanFleet, refused: tuple[OfferRefused, ...]):
        catalog_dir = cmd.request.get("catalog_dir") or os.environ.get("YETO_CATALOG_DIR")
        if catalog_dir not in catalogs:
            catalogs[catalog_dir] = load_catalog(catalog_dir=catalog_dir)
        catalog = catalogs[catalog_dir]
        cache = state_dir / "cache" / "signals.json"
        return handle(cmd, lambda req: shape_fleet(req, catalog, cache_path=cache, now=time.time(), refusals=refused))

    async def act(intent: Plan, ctx: Context):
        return [await asyncio.to_thread(plan_blocking, intent.cmd, tuple(ctx.state or ()))]

    return ServiceSpec(name="planner", initial=tuple, evolve=evolve, decide=decide, act=act,
                       event_subjects=(event_subject(SYSTEM_RUN, "ServiceStarted"), event_subject("*", "OfferRefused")))
