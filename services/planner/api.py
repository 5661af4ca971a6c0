"""The planner's public face: what the CLI may use, and `shape_fleet`, the one planning decision it shares with the service.

`Signals` (the clouds' stock and preemption signals, given rather than gathered) is for the planner benchmark.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from yeto.schemas.memory_model import Workload, fits
from yeto.schemas.offers import OfferRefused
from yeto.services.planner.catalog import FIXTURE_DIR, CatalogUnavailable, Offering, load_catalog
from yeto.services.planner.expert_memory import TP_KEY, describe_split, moe_split
from yeto.services.planner.gpus import GPUS, NO_NF4
from yeto.services.planner.plan import FleetPlan, plan_fleet
from yeto.services.planner.refusals import with_refusals
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals, gather_signals

__all__ = ["FIXTURE_DIR", "GPUS", "NO_NF4", "TP_KEY", "CatalogUnavailable", "FleetPlan", "Offering", "PlanRequest", "Signals",
           "Workload", "describe_split", "fits", "load_catalog", "moe_split", "shape_fleet"]


def shape_fleet(request: PlanRequest, catalog: list[Offering], *, cache_path: Path, now: float,
                refusals: Sequence[OfferRefused] = ()) -> FleetPlan:
    """Plan `request` over `catalog` with the live signals of the clouds it allows (`yeto shape` and PlanFleet alike).

    Reads the signals (cached in `cache_path` for their TTL, `now` being the clock); offers refused at launch
    (`refusals`, the planner service's fold of OfferRefused) are out of stock for their cool-down; the plan is pure.
    """
    clouds = sorted({o.cloud for o in catalog if not request.clouds or o.cloud in request.clouds})
    signals = gather_signals(clouds, cache_path=cache_path, now=now)
    signals = with_refusals(signals, refusals, datetime.fromtimestamp(now, timezone.utc))
    return plan_fleet(request, catalog, signals)
