"""Events about cloud offers: a cloud refused an island at launch for capacity or quota.

The planner reads them (services/planner/refusals.py): an offer refused within `cooldown_s` is planned as out of
stock, so a plan made after the refusal does not ask the same cloud, region and GPU shape again at once.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from yeto.schemas.base import Event, registry


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
    instance_type: str = ""         # when the cloud's answer names it
    cause: Literal["capacity", "quota"]
    reason: str                     # the cloud's words, cut to 300 characters
    cooldown_s: float = Field(default=1800.0, ge=0)


EXAMPLES = [
    OfferRefused(id="ex-offer-refused", run_id="r-demo", source="launcher", island=1, cloud="aws", region="us-east-2",
                 gpu="H100", count=8, cause="capacity",
                 reason="InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge capacity"),
]
