"""The run limits of `yeto launch` and which of them ends a run now; spend itself is the shared fold's (schemas/spend.py)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.run_view import RunView, spend_usd


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The limits the finalizer enforces (None = no limit); `--max-steps` the learners enforce themselves."""

    max_tokens: int | None = None
    """Tokens trained, summed over every learner generation."""
    max_time_s: float | None = None
    """Seconds since launch."""
    max_spend: float | None = None
    """USD, islands plus head."""

    @classmethod
    def from_recipe(cls, recipe: dict[str, Any] | LaunchRecipe) -> Limits:
        lim = LaunchRecipe.upcast(recipe).limits
        return cls(max_tokens=lim.max_tokens, max_time_s=lim.max_time_s, max_spend=lim.max_spend)


def cut_reason(run: RunView, *, now: datetime, period_s: float) -> tuple[str, str] | None:
    """Which limit ends the run now, if any, with a detail line. The budget looks one accounting period
    ahead: cutting when the *next* check would be over the cap keeps the spend within the cap plus one period."""
    limits = Limits.from_recipe(run.recipe)
    if limits.max_spend is not None and spend_usd(run, now + timedelta(seconds=period_s)) >= limits.max_spend:
        return "budget", (f"spend ${spend_usd(run, now):.4f} would reach --max-spend ${limits.max_spend:.2f} "
                          f"within the next {period_s:.0f}s accounting period")
    if limits.max_tokens is not None and run.num_tokens >= limits.max_tokens:
        return "max_tokens", f"{run.num_tokens} tokens trained >= --max-tokens {limits.max_tokens}"
    elapsed = (now - run.launched_at).total_seconds() if run.launched_at else 0.0
    if limits.max_time_s is not None and elapsed >= limits.max_time_s:
        return "max_time", f"{elapsed:.0f}s since launch >= --max-time {limits.max_time_s:.0f}s"
    return None
