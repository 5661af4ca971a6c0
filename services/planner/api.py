"""The planner's public face: what the CLI may use, and `shape_fleet`, the one planning decision it shares with the service.

`Signals` (the clouds' stock and preemption signals, given rather than gathered) is for the planner benchmark.
"""
from __future__ import annotations

from pathlib import Path

from yeto.services.planner.catalog import FIXTURE_DIR, CatalogUnavailable, Offering, load_catalog
from yeto.services.planner.gpus import GPUS, NO_NF4
from yeto.services.planner.memory import Workload, fits
from yeto.services.planner.plan import FleetPlan, plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals, gather_signals

__all__ = ["FIXTURE_DIR", "GPUS", "NO_NF4", "CatalogUnavailable", "FleetPlan", "Offering", "PlanRequest", "Signals",
           "Workload", "fits", "load_catalog", "shape_fleet"]


def shape_fleet(request: PlanRequest, catalog: list[Offering], *, cache_path: Path, now: float) -> FleetPlan:
    """Plan `request` over `catalog` with the live signals of the clouds it allows (`yeto shape` and PlanFleet alike).

    Reads the signals (cached in `cache_path` for their TTL, `now` being the clock); the plan itself is pure.
    """
    clouds = sorted({o.cloud for o in catalog if not request.clouds or o.cloud in request.clouds})
    return plan_fleet(request, catalog, gather_signals(clouds, cache_path=cache_path, now=now))
