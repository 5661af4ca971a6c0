

"""Events and commands of a run's life: launch, islands (up, preempted, replaced, dropped), final cut, artifact, end.


Island events carry the island's spec and `price_per_hour`, so a run's spend is derivable from the tape alone:


uptime runs from IslandUp / IslandReplaced to IslandExited / IslandPreempted / IslandDropped / IslandStopped.


"""


from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from yeto.schemas.base import Command, Event, registry
from yeto.schemas.launch_spec import MAX_ISLANDS, Fleet, FleetEntry, Price, Recipe


def learner_name(island: int) -> str:
    """The learner id of an island (the same for all its generations)."""
    return f"island-{island}"


class IslandEvent(Event):
    """Fields every island event carries."""

    island: int = Field(ge=0)       # index in the run's fleet
    generation: int = Field(default=0, ge=0)  # incarnation: 0 at launch, +1 per replacement
    spec: dict[str, Any]            # the fleet entry: cloud, gpu, count, nodes, region, spot
    price_per_hour: Price = 0.0     # USD per hour while up (0 for local islands); finite, >= 0
    backend: str = "local"          # local | skypilot
    handle: str = ""                # backend handle: process group id, managed job id


@registry.register
class RunLaunched(Event):
    """The launcher accepted a run; `recipe` is LaunchRun's (a LaunchRecipe's wire dict, schemas/launch_recipe.py)."""

    type: Literal["RunLaunched"] = "RunLaunched"
    version: Literal[1] = 1
    fleet: Fleet                    # checked as LaunchRun's are (launch_spec.py): a foreign one that is not, is rejected
    recipe: Recipe


@registry.register
class IslandRequested(IslandEvent):
    type: Literal["IslandRequested"] = "IslandRequested"
    version: Literal[2] = 2
    reason: str = ""    # v2: a move's (the planner's MoveIsland): what changed and the budget kept; "" for other starts


@registry.upcaster("IslandRequested", 1)
def _island_requested_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "reason": ""}


@registry.register
class IslandUp(IslandEvent):
    """The backend runs the island's processes (generation 0); uptime starts."""

    type: Literal["IslandUp"] = "IslandUp"
    version: Literal[1] = 1


@registry.register
class IslandExited(IslandEvent):
    """The backend saw the island's processes end; exit_code 0 = trained to the end, None = killed or lost."""

    type: Literal["IslandExited"] = "IslandExited"
    version: Literal[1] = 1
    exit_code: int | None = None
    detail: str = ""


@registry.register
class IslandPreempted(IslandEvent):
    """The island (this generation) is gone: preempted, crashed, killed or silent; a replacement follows."""

    type: Literal["IslandPreempted"] = "IslandPreempted"
    version: Literal[1] = 1
    reason: str


@registry.register
class IslandReplaced(IslandEvent):
    """A replacement (this generation, same spec) is up; uptime starts again."""

    type: Literal["IslandReplaced"] = "IslandReplaced"
    version: Literal[1] = 1
    previous_generation: int


@registry.register
class IslandDropped(IslandEvent):
    """The island is given up (not back within --recover-timeout, or crashing); the run goes on without it."""

    type: Literal["IslandDropped"] = "IslandDropped"
    version: Literal[1] = 1
    reason: str


@registry.register
class IslandStopped(IslandEvent):
    """The island was stopped on purpose (final cut done, `yeto down`); uptime ends."""

    type: Literal["IslandStopped"] = "IslandStopped"
    version: Literal[1] = 1
    reason: str = "run ended"


ISLAND_ENDS: dict[str, str] = {cls.__name__: how for cls, how in (
    (IslandExited, "exited"), (IslandPreempted, "preempted"), (IslandStopped, "stopped"), (IslandDropped, "dropped"))}
"""The events that end an island generation as the launcher saw it, each with the word for how it ended. Every
reader takes them from here: the syncer stops counting the generation as live, its meter stops (spend.py), the
dashboard closes its span."""


class IslandCommand(Command):
    owner: ClassVar[str] = "launcher"
    island: int = Field(ge=0, lt=MAX_ISLANDS)
    generation: int = Field(default=0, ge=0)
    spec: FleetEntry


@registry.register
class StartIsland(IslandCommand):
    """Start one generation of an island (spawning happens once, in the launcher's command handler)."""

    type: Literal["StartIsland"] = "StartIsland"
    version: Literal[2] = 2
    recipe: Recipe
    num_islands: int = Field(ge=1, le=MAX_ISLANDS)
    price_per_hour: Price = 0.0
    start_step: int = Field(default=0, ge=0)  # v2: a replacement resumes where its predecessor stopped (step, data shard)


@registry.upcaster("StartIsland", 1)
def _start_island_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "start_step": 0}


@registry.register
class StopIsland(IslandCommand):
    type: Literal["StopIsland"] = "StopIsland"
    version: Literal[1] = 1
    reason: str = "run ended"
    price_per_hour: Price = 0.0


_SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False}


_ISLAND: dict[str, Any] = dict(run_id="r-demo", source="launcher", island=0, spec=_SPEC, handle="41234")


_RECIPE = {"train": {"model": "smollm2-135m", "max_steps": 20}, "limits": {"max_spend": 5.0}, "output": "",
           "recover_timeout_s": 600}


EXAMPLES = [
    RunLaunched(id="ex-run-launched", run_id="r-demo", source="launcher", fleet=[_SPEC], recipe=_RECIPE),
    IslandRequested(id="ex-island-requested", **_ISLAND),
    IslandUp(id="ex-island-up", **_ISLAND),
    IslandExited(id="ex-island-exited", exit_code=None, detail="process group gone without an exit status", **_ISLAND),
    IslandPreempted(id="ex-island-preempted", reason="killed (no exit status)", **_ISLAND),
    IslandReplaced(id="ex-island-replaced", **{**_ISLAND, "generation": 1, "handle": "41300"}, previous_generation=0),
    IslandDropped(id="ex-island-dropped", reason="not back within --recover-timeout 600s", **_ISLAND),
    IslandStopped(id="ex-island-stopped", **_ISLAND),
    StartIsland(id="ex-start-island", run_id="r-demo", source="launcher", island=0, spec=_SPEC, recipe=_RECIPE, num_islands=2),
    StopIsland(id="ex-stop-island", run_id="r-demo", source="finalizer", island=0, spec=_SPEC),
]
