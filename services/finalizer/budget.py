"""Spend as a pure fold of island events: Σ price × uptime, and the budget and limit checks of a run.

An island's meter runs from IslandUp / IslandReplaced to the event that ends that generation (exited,
preempted, dropped, stopped). The head VM's price runs from launch to the end of the run.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Meter:
    """One island's spend: closed intervals in USD, plus the open one since `up_since`."""

    price_per_hour: float = 0.0
    up_since: datetime | None = None
    closed_usd: float = 0.0

    def start(self, ts: datetime, price: float) -> "Meter":
        return self if self.up_since is not None else replace(self, price_per_hour=price, up_since=ts)

    def stop(self, ts: datetime) -> "Meter":
        if self.up_since is None:
            return self
        hours = max(0.0, (ts - self.up_since).total_seconds()) / 3600
        return replace(self, up_since=None, closed_usd=self.closed_usd + hours * self.price_per_hour)

    def at(self, now: datetime) -> float:
        return self.stop(now).closed_usd


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The run limits of `yeto launch` (None = no limit)."""

    max_steps: int | None = None
    """Inner steps per learner (the learners stop there themselves)."""
    max_tokens: int | None = None
    """Tokens trained, summed over every learner generation."""
    max_time_s: float | None = None
    """Seconds since launch."""
    max_spend: float | None = None
    """USD, islands plus head."""

    @classmethod
    def from_recipe(cls, recipe: dict[str, Any]) -> "Limits":
        lim = recipe.get("limits") or {}
        return cls(**{k: lim.get(k) for k in ("max_steps", "max_tokens", "max_time_s", "max_spend")})


def spend(meters: tuple[Meter, ...], head_price: float, launched_at: datetime, now: datetime) -> float:
    head = head_price * max(0.0, (now - launched_at).total_seconds()) / 3600
    return head + sum(m.at(now) for m in meters)


def cut_reason(*, limits: Limits, meters: tuple[Meter, ...], head_price: float, launched_at: datetime,
               now: datetime, period_s: float, tokens: int) -> tuple[str, str] | None:
    """Which limit ends the run now, if any, with a detail line. The budget looks one accounting period
    ahead: cutting when the *next* check would be over the cap keeps the spend within the cap plus one period."""
    from datetime import timedelta

    if limits.max_spend is not None:
        ahead = spend(meters, head_price, launched_at, now + timedelta(seconds=period_s))
        if ahead >= limits.max_spend:
            return "budget", (f"spend ${spend(meters, head_price, launched_at, now):.4f} would reach --max-spend "
                              f"${limits.max_spend:.2f} within the next {period_s:.0f}s accounting period")
    if limits.max_tokens is not None and tokens >= limits.max_tokens:
        return "max_tokens", f"{tokens} tokens trained >= --max-tokens {limits.max_tokens}"
    elapsed = (now - launched_at).total_seconds()
    if limits.max_time_s is not None and elapsed >= limits.max_time_s:
        return "max_time", f"{elapsed:.0f}s since launch >= --max-time {limits.max_time_s:.0f}s"
    return None
