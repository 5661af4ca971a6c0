"""The planner service's decision: a PlanFleet command in, a FleetPlanned or FleetPlanFailed event out (pure)."""
from __future__ import annotations

from yeto.schemas.commands import PlanFleet
from yeto.schemas.plan import FleetPlanFailed, FleetPlanned
from yeto.services.planner.catalog import Offering
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals


def handle(cmd: PlanFleet, catalog: list[Offering], signals: Signals) -> FleetPlanned | FleetPlanFailed:
    """Plan the fleet the command asks for; a request that cannot be planned fails with its reason, never raises."""
    try:
        plan = plan_fleet(PlanRequest.from_dict(cmd.request), catalog, signals)
    except (ValueError, TypeError) as e:   # a bad request is an answer too: the asker learns what to fix
        return cmd.caused(FleetPlanFailed, reason=str(e), source="planner")
    if not plan.feasible:
        return cmd.caused(FleetPlanFailed, reason=plan.reason, cheapest=plan.cheapest, source="planner")
    return cmd.caused(FleetPlanned, plan=plan.to_dict(), source="planner")
