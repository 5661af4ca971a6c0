"""Commands: what the CLI or a service asks another service to do. `owner` names the handling service."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from yeto.schemas.base import Command, registry
from yeto.schemas.launch_spec import Fleet, Recipe


@registry.register
class LaunchRun(Command):
    """Start a run: the launcher brings up its islands; the recipe is everything a learner needs."""

    owner: ClassVar[str] = "launcher"
    type: Literal["LaunchRun"] = "LaunchRun"
    version: Literal[1] = 1
    fleet: Fleet        # one entry per island, parsed from --gpu (or from the planner's plan); checked (launch_spec.py)
    recipe: Recipe      # model, data, tuning, seq_len, sync settings, limits ...; the parts services read are checked


@registry.register
class StopRun(Command):
    """Stop a run: gracefully (final cut, then teardown) or at once (`now`)."""

    owner: ClassVar[str] = "finalizer"
    type: Literal["StopRun"] = "StopRun"
    version: Literal[1] = 1
    now: bool = False
    reason: str = "user"


@registry.register
class PlanFleet(Command):
    """Plan a fleet under a budget or a TFLOPs target; answered with a FleetPlanned event."""

    owner: ClassVar[str] = "planner"
    type: Literal["PlanFleet"] = "PlanFleet"
    version: Literal[1] = 1
    request: dict[str, Any]


EXAMPLES = [
    LaunchRun(id="ex-launch-run", run_id="r-demo", source="cli",
              fleet=[{"cloud": "local", "count": 1, "accelerator": "cpu"}], recipe={"model": "smollm2-135m", "max_steps": 20}),
    StopRun(id="ex-stop-run", run_id="r-demo", source="cli"),
    PlanFleet(id="ex-plan-fleet", run_id="r-demo", source="cli", request={"model": "qwen35-9b", "budget": 40.0}),
]
