"""Cloud offers refused at launch (OfferRefused); the planner's answer: move the island (MoveIsland), or ReplanFailed.

When no offer can take the refused island's place, ReplanFailed says why and what the user can change.

The planner reads refusals (services/planner/refusals.py): an offer refused within `cooldown_s` is planned as out of
stock, so a plan made after the refusal does not ask the same cloud, region and GPU shape again at once; and it
answers each with a MoveIsland to the next-best offer within the run's budget (its GPU shape elsewhere, else another
GPU type or count that holds the model at its TFLOPs; services/planner/replan.py), which the
launcher starts as the island's next generation.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from yeto.schemas.base import Event, registry
from yeto.schemas.fleet import IslandCommand
from yeto.schemas.launch_spec import Price


@registry.register
class OfferRefused(Event):
    """A cloud said no to one island at launch (`cause`: capacity or quota); the offer is avoided for `cooldown_s`."""

    type: Literal["OfferRefused"] = "OfferRefused"
    version: Literal[1] = 1
    island: int = Field(ge=0)
    generation: int = Field(default=0, ge=0)
    cloud: str
    region: str = ""                # "" when the fleet entry named none (the cloud picked)
    gpu: str
    count: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1)
    spot: bool = False
    price_per_hour: Price = 0.0     # what the refused island would have cost (its fleet entry's price)
    instance_type: str = ""         # when the cloud's answer names it
    cause: Literal["capacity", "quota"]
    reason: str                     # the cloud's words, cut to 300 characters
    cooldown_s: float = Field(default=1800.0, ge=0)


@registry.register
class MoveIsland(IslandCommand):
    """Start the island's generation `generation` on `spec`, the next-best offer within the run's budget: the one it was
    started on was refused (`refused`: that OfferRefused's id). The launcher ignores it once the island moved on."""

    type: Literal["MoveIsland"] = "MoveIsland"
    version: Literal[1] = 1
    price_per_hour: Price = 0.0
    refused: str
    reason: str


@registry.register
class ReplanFailed(Event):
    """No offer can take the place of an island a cloud refused: why (`reason`), and what to change (`advice`).

    `refused` is that OfferRefused's id. `reason`: no offer that holds the island is left, or the cheapest costs more
    than the run's budget allows (a run from before 2026-12-05: the refused price + 10 %); `advice`: the fleet's
    --gpu, --exclude-regions, the budget. The planner publishes it once per refused generation and still moves the
    island if an offer comes back within the refusal's cool-down."""

    type: Literal["ReplanFailed"] = "ReplanFailed"
    version: Literal[1] = 1
    island: int = Field(ge=0)
    generation: int = Field(default=0, ge=0)     # the refused generation
    refused: str
    reason: str
    advice: str


EXAMPLES = [
    OfferRefused(id="ex-offer-refused", run_id="r-demo", source="launcher", island=1, cloud="aws", region="us-east-2",
                 gpu="H100", count=8, spot=True, price_per_hour=11.25, cause="capacity",
                 reason="InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge capacity"),
    MoveIsland(id="ex-move-island", run_id="r-demo", source="planner", island=1, generation=1,
               spec={"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-west-2", "spot": True},
               price_per_hour=12.69, refused="ex-offer-refused",
               reason="aws:8xh100@us-east-2 refused (capacity): next-best offer aws:8xh100@us-west-2 at $12.69/hr"),
    ReplanFailed(id="ex-replan-failed", run_id="r-demo", source="planner", island=1, refused="ex-offer-refused",
                 reason="the cheapest other aws offer of 1x8xH100, us-east-1 at $17.63/hr, costs more than the "
                        "refused $11.25/hr + 10%",
                 advice="launch again with --gpu aws:8xh100@us-east-1 to pay for it, or without --gpu with "
                        "--exclude-regions us-east-2 and a --budget-per-hour the planner can place it under"),
]
