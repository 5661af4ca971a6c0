"""Billing, one rule for every reader of a run (`yeto status`, the SQL views, the budget cutoff).

An island generation is billed at the `price_per_hour` of its IslandUp / IslandReplaced until the island's
next end (fleet.py's ISLAND_ENDS) / IslandUp / IslandReplaced of that or a newer generation (an event of an
older generation changes nothing), or until the run's first end event.
The head VM is billed at the recipe's `head_price_per_hour` from RunLaunched to the run's end. Times are
the events' own timestamps; an open interval is priced up to a `now` the caller passes in.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from yeto.schemas.fleet import ISLAND_ENDS

METER_START = ("IslandUp", "IslandReplaced")
METER_STOP = tuple(ISLAND_ENDS)


def hours_between(start: datetime | None, end: datetime | None) -> float:
    """Hours from start to end, 0 when either is unknown or end is earlier (clocks of two hosts)."""
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds()) / 3600.0


@dataclass(frozen=True)
class Meter:
    """One island's bill: closed intervals (hours, USD) plus the open one since `up_since` at `price_per_hour`."""

    price_per_hour: float = 0.0
    generation: int = 0
    """Generation of the last interval started: events of older generations do not touch the meter."""
    up_since: datetime | None = None
    closed_hours: float = 0.0
    closed_usd: float = 0.0

    def start(self, ts: datetime, price: float, generation: int) -> Meter:
        return replace(self.stop(ts), price_per_hour=price, generation=generation, up_since=ts)

    def stop(self, ts: datetime) -> Meter:
        if self.up_since is None:
            return self
        h = hours_between(self.up_since, ts)
        return replace(self, up_since=None, closed_hours=self.closed_hours + h,
                       closed_usd=self.closed_usd + h * self.price_per_hour)

    def apply(self, type_: str, ts: datetime, price: float, generation: int) -> Meter:
        """The meter after one island event of `type_` (any other type leaves it as it is)."""
        if generation < self.generation:
            return self
        if type_ in METER_START:
            return self.start(ts, price, generation)
        return self.stop(ts) if type_ in METER_STOP else self

    def hours_at(self, until: datetime | None) -> float:
        return self.closed_hours + hours_between(self.up_since, until)

    def usd_at(self, until: datetime | None) -> float:
        return self.closed_usd + hours_between(self.up_since, until) * self.price_per_hour
