"""Events of the fleet planner: a plan answering PlanFleet, or why no fleet fits and the cheapest option."""
from __future__ import annotations

from typing import Any, Literal

from yeto.schemas.base import Event, registry


@registry.register
class FleetPlanned(Event):
    """The planner's answer: `plan` is the `yeto shape --json` object (islands, totals, binding, rejected, ...)."""

    type: Literal["FleetPlanned"] = "FleetPlanned"
    version: Literal[1] = 1
    plan: dict[str, Any]


@registry.register
class FleetPlanFailed(Event):
    """No fleet satisfies the request; `cheapest` is the cheapest island that would hold the model, if any."""

    type: Literal["FleetPlanFailed"] = "FleetPlanFailed"
    version: Literal[1] = 1
    reason: str
    cheapest: dict[str, Any] | None = None


_ISLAND = {"cloud": "aws", "region": "us-east-2", "instance_type": "p5.48xlarge", "gpu": "H100", "count": 8,
           "nodes": 1, "spot": True, "price_per_hour": 11.2543, "tflops": 3125.73, "memory_per_gpu_gb": 4.8}
EXAMPLES = [
    FleetPlanned(id="ex-fleet-planned", run_id="r-demo", source="planner", causation_id="ex-plan-fleet", plan={
        "feasible": True, "mode": "budget", "islands": [_ISLAND], "islands_price_per_hour": 11.2543,
        "head_price_per_hour": 0.19, "total_price_per_hour": 11.4443, "total_tflops": 3125.73,
        "binding": ["max islands: 1 reached"], "rejected": [], "warnings": [], "gpu": "aws:8xh100@us-east-2",
        "launch_command": "yeto launch --model qwen35-9b --gpu aws:8xh100@us-east-2 --data <DATA>",
        "status": "OPTIMAL", "gap": 0.0, "solve_seconds": 0.01, "reason": "", "cheapest": _ISLAND}),
    FleetPlanFailed(id="ex-fleet-plan-failed", run_id="r-demo", source="planner", causation_id="ex-plan-fleet",
                    reason="budget $1.00/hr fits no island: the cheapest option is runpod:1xa100-80gb@CA at $1.39/hr",
                    cheapest=_ISLAND),
]
