"""The planner service's decision: a PlanFleet command in, a FleetPlanned or FleetPlanFailed event out (pure).

`shape` is the planning function (`api.shape_fleet` bound to the catalog and the signal cache in the service,
`plan_fleet` over fixed signals in tests): the answer depends only on what it returns.
"""
from __future__ import annotations

from collections.abc import Callable

from yeto.schemas.commands import PlanFleet
from yeto.schemas.plan import FleetPlanFailed, FleetPlanned
from yeto.services.planner.plan import FleetPlan
from yeto.services.planner.request import PlanRequest


def handle(cmd: PlanFleet, shape: Callable[[PlanRequest], FleetPlan]) -> FleetPlanned | FleetPlanFailed:
    """Plan the fleet the command asks for; a request that cannot be planned fails with its reason, never raises."""
    try:
        plan = shape(PlanRequest.from_dict(cmd.request))
    except (ValueError, TypeError) as e:   # a bad request is an answer too: the asker learns what to fix
        return cmd.caused(FleetPlanFailed, reason=str(e), source="planner")
    if not plan.feasible:
        return cmd.caused(FleetPlanFailed, reason=plan.reason, cheapest=plan.cheapest, source="planner")
    return cmd.caused(FleetPlanned, plan=plan.to_dict(), source="planner")
