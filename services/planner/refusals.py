"""Offers a cloud refused at launch (OfferRefused on the tape) as a signal: out of stock until their cool-down ends (pure).

The planner service folds the refusals it sees (wiring.py) and plans with `with_refusals(signals, refusals, now)`,
so a plan made after a refusal moves that island to the next-best offer instead of asking the same cloud again.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from yeto.schemas.offers import OfferRefused
from yeto.services.planner.signals import Reading, Signals

KEEP = 200      # refusals the service keeps (the newest): more than any cool-down holds in practice


def active(refusals: Iterable[OfferRefused], now: datetime) -> list[OfferRefused]:
    return [r for r in refusals if (now - r.ts).total_seconds() < r.cooldown_s]


def with_refusals(signals: Signals, refusals: Iterable[OfferRefused], now: datetime) -> Signals:
    """`signals` with every offer refused within its cool-down marked refused (cloud, region, GPU, count)."""
    live = active(refusals, now)
    if not live:
        return signals
    refused = dict(signals.refused)
    readings = list(signals.readings)
    for r in live:
        left = r.cooldown_s - (now - r.ts).total_seconds()
        refused[(r.cloud, r.region, r.gpu, r.count)] = (f"{r.cause} refused at launch {r.ts:%H:%M:%S} UTC "
                                                        f"({r.reason[:120]}); avoided for {left / 60:.0f} more min")
        readings.append(Reading(r.cloud, "refusal", f"{r.region or '*'}/{r.count}x{r.gpu}", r.cause,
                                (now - r.ts).total_seconds(), f"OfferRefused {r.id} (run {r.run_id})"))
    return replace(signals, refused=refused, readings=tuple(readings))
