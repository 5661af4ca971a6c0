"""A cloud's "no" at launch, told apart from other failures (pure): capacity or quota, in the clouds' own words.

`refusal(spec, error, ...)` is the OfferRefused event for a start that failed because the cloud has no capacity
for the shape (or the account's quota is spent), or None for any other failure (a bad image, a network error),
which the launcher simply retries.
"""
from __future__ import annotations

import re
from typing import Literal

from yeto.schemas.base import derive_id
from yeto.schemas.offers import OfferRefused

COOLDOWN_S = 1800.0     # an offer refused is not planned again for 30 minutes

# Substrings (case-insensitive) of the clouds' and SkyPilot's refusals. Quota first: "quota" errors can also say
# "capacity" ("quota ... capacity"), never the other way round.
QUOTA = ("vcpulimitexceeded", "maxspotinstancecountexceeded", "quota_exceeded", "quotaexceeded", "exceeded quota",
         "quota exceeded", "exceeds quota", "insufficient quota", "quota limit", "spot vcpu limit")
CAPACITY = ("insufficientinstancecapacity", "insufficient capacity", "insufficient-capacity",
            "zone_resource_pool_exhausted", "does not have enough resources", "resource_pool_exhausted",
            "skunotavailable", "allocationfailed", "zonalallocationfailed", "not enough capacity",
            "no longer any instances available", "out of capacity", "capacity not available", "unavailable capacity",
            "resourcesunavailableerror", "failed to acquire resources", "spotmaxpricetoolow")


def kind_of(error: str) -> Literal["capacity", "quota"] | None:
    text = error.lower()
    if any(k in text for k in QUOTA):
        return "quota"
    if any(k in text for k in CAPACITY):
        return "capacity"
    return None


def refusal(spec: dict, error: str, *, run_id: str, island: int, generation: int, source: str,
            price_per_hour: float = 0.0, cooldown_s: float = COOLDOWN_S) -> OfferRefused | None:
    """The OfferRefused for one failed start, or None when `error` is not a capacity or quota refusal.

    One per island generation (its id derives from run, island and generation): a start retried and refused
    again does not add another."""
    kind = kind_of(error)
    if kind is None:
        return None
    itype = re.search(r"\b([a-z]\d[a-z0-9-]*\.\d*x?large|[a-z]\d-[a-z]+-\d+g?|gpu_\d+x_[a-z0-9_]+)\b", error)
    return OfferRefused(id=derive_id(run_id, "OfferRefused", island, generation), run_id=run_id, source=source,
                        island=island, generation=generation, cloud=str(spec.get("cloud", "")),
                        region=str(spec.get("region") or ""), gpu=str(spec.get("gpu", "")),
                        count=int(spec.get("count", 1)), nodes=int(spec.get("nodes") or 1), spot=bool(spec.get("spot")),
                        price_per_hour=price_per_hour, instance_type=itype.group(1) if itype else "", cause=kind,
                        reason=" ".join(error.split())[:300], cooldown_s=cooldown_s)
