"""What a refused island's move must respect (pure): the run's $/hr budget, and where and on what it may go.

The planner service folds each run's RunLaunched (its fleet and recipe) and every IslandRequested (each island's
newest generation and price) into a `RunBounds`. `yeto launch` records `--budget-per-hour` and `--price-margin` in
the recipe's `prices` (schemas/recipe_sections.py); the fleet's islands are priced at catalog $/hr:

- with a budget (the planner picked the fleet): the fleet after the move, with the margin, plus the head, stays
  within it: (others + new) x (1 + margin) + head <= budget, as the plan itself was solved (docs/PLANNER.md);
- without one (`--gpu` named the fleet, or `--flops` alone): the fleet after the move stays within the launched
  fleet's price x (1 + margin).

A run whose recipe records no margin (launched before 2026-12-05) has no bounds: the move keeps to the refused
island's GPU shape and cloud at most the refused price + 10 % (replan.py), as it did then.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from yeto.schemas.fleet import IslandRequested, RunLaunched


@dataclass(frozen=True)
class RunBounds:
    budget: float | None            # $/hr for islands (with margin) plus the head; None: the launched fleet's price caps
    margin: float
    head_price: float
    launched: float                 # the launched fleet's islands, catalog $/hr
    islands: tuple[float, ...]      # each island's current $/hr (its newest generation requested)
    clouds: tuple[str, ...] = ()    # where a move may go (() = any cloud of the catalog)
    regions: tuple[str, ...] = ()
    exclude_regions: tuple[str, ...] = ()
    workload: dict[str, Any] | None = None   # model and training settings to size other shapes; None: same shape only

    def room(self, island: int) -> float:
        """The catalog $/hr the island may cost so that the fleet stays within the run's bound."""
        others = sum(p for i, p in enumerate(self.islands) if i != island)
        if self.budget is not None:
            return (self.budget - self.head_price) / (1 + self.margin) - others
        return self.launched * (1 + self.margin) - others

    def describe(self, island: int, price: float) -> str:
        """The bound a move to `price` respects, as the end of a sentence (`yeto status` prints it)."""
        fleet = sum(p for i, p in enumerate(self.islands) if i != island) + price
        if self.budget is not None:
            return (f"the fleet's {usd(fleet)}/hr + {self.margin:.0%} margin + head {usd(self.head_price)}/hr "
                    f"= {usd(fleet * (1 + self.margin) + self.head_price)}/hr within the run's --budget-per-hour "
                    f"{usd(self.budget)}")
        return (f"the fleet's {usd(fleet)}/hr within the launched fleet's {usd(self.launched)}/hr + "
                f"{self.margin:.0%} ({usd(self.launched * (1 + self.margin))}/hr; the run named its fleet, no budget)")


def usd(x: float) -> str:
    """Dollars to the cent, or to a tenth of a cent below $1 (a T4 island's 10 % is 2 cents)."""
    return f"${x:.2f}" if x >= 1 else f"${x:.3f}"


def _csv(value: Any) -> tuple[str, ...]:
    return tuple(x.strip() for x in value.split(",") if x.strip()) if isinstance(value, str) else ()


def bounds_of(e: RunLaunched) -> RunBounds | None:
    """The run's bounds from its RunLaunched; None for a recipe that recorded no --price-margin (an old tape)."""
    recipe = e.recipe if isinstance(e.recipe, dict) else {}
    prices = recipe.get("prices") or {}
    margin = prices.get("price_margin")
    if not isinstance(margin, (int, float)) or isinstance(margin, bool):
        return None
    budget = prices.get("budget_per_hour")
    config = recipe.get("config") or {}
    launched = tuple(float(s.get("price_per_hour") or 0.0) for s in e.fleet)
    named = bool(config.get("gpu"))      # --gpu named the fleet: its clouds hold the run's credentials
    clouds = tuple(sorted({str(s.get("cloud")) for s in e.fleet})) if named else _csv(config.get("clouds"))
    train = recipe.get("train") or {}
    workload = {"model": train.get("model") or "", "weights_gb": config.get("weights_gb"),
                "tuning": train.get("tuning", "lora"), "base_quantization": train.get("base_quantization", "none"),
                "seq_len": train.get("seq_len", 512), "micro_batch": train.get("micro_batch", 4),
                "max_nodes": 8} if train.get("model") and not recipe.get("island_backend") == "megatron" else None
    return RunBounds(budget=float(budget) if isinstance(budget, (int, float)) else None, margin=float(margin),
                     head_price=float(prices.get("head_price_per_hour") or 0.0), launched=sum(launched),
                     islands=launched, clouds=clouds, regions=_csv(config.get("regions")),
                     exclude_regions=_csv(config.get("exclude_regions")), workload=workload)


def requested(b: RunBounds, e: IslandRequested) -> RunBounds:
    """The bounds once an island's new generation was requested: its price is the new one."""
    if e.island >= len(b.islands):
        return b
    return replace(b, islands=tuple(e.price_per_hour if i == e.island else p for i, p in enumerate(b.islands)))
