"""The next-best offer for an island a cloud refused at launch (pure): the same GPU shape elsewhere, within its price.

A refused island keeps its GPU type, GPUs per node and node count, so it holds the model and trains at the same
TFLOPs wherever it starts; what changes is where. The replacement is the cheapest offering of that shape on the same
cloud (whose credentials the run already uses) that the live signals and the refusals still allow (stock, placement
score, quota room, not refused within its cool-down), priced at most the refused island's price plus the planner's
margin, so the run stays within the budget it was planned under.
"""
from __future__ import annotations

from dataclasses import dataclass

from yeto.schemas.offers import OfferRefused
from yeto.services.planner.candidates import NO_CAPACITY_SCORE
from yeto.services.planner.catalog import Offering
from yeto.services.planner.signals import Signals

MARGIN = 0.10   # the planner's default --price-margin: a replacement may cost this much more than the refused offer


@dataclass(frozen=True)
class Replacement:
    offering: Offering
    spot: bool
    price: float          # $/hr for the island (all nodes), the live spot price where known

    def spec(self, nodes: int) -> dict:
        o = self.offering
        return {"cloud": o.cloud, "gpu": o.gpu, "count": o.count, "nodes": nodes, "region": o.region, "spot": self.spot}


def _price(o: Offering, spot: bool, nodes: int, signals: Signals) -> float:
    live = signals.spot_prices.get((o.cloud, o.region, o.instance_type)) if spot else None
    return (live if live is not None else o.spot_price if spot and o.spot_price is not None else o.price) * nodes


def _allowed(o: Offering, r: OfferRefused, spot: bool, signals: Signals) -> bool:
    if signals.refusal(o.cloud, o.region, o.gpu, o.count) or o.region == r.region:
        return False
    if signals.stock_cap(o.cloud, o.region, o.instance_type, o.gpu) <= 0:
        return False
    score = signals.score(o.cloud, o.region, o.instance_type) if spot else None
    if score is not None and score <= NO_CAPACITY_SCORE:
        return False
    return all(q.limit - q.used >= (o.vcpus or 0) * r.nodes for q in signals.quotas
               if q.cloud == o.cloud and q.region in (None, o.region) and o.instance_type.startswith(q.family)
               and q.spot == spot and q.unit == "vcpus")


def replacement(r: OfferRefused, catalog: list[Offering], signals: Signals,
                margin: float = MARGIN) -> Replacement | str:
    """The cheapest allowed offering of the refused island's shape, or why there is none."""
    options = []
    for o in catalog:
        if (o.cloud, o.gpu, o.count) != (r.cloud, r.gpu, r.count):
            continue
        spot = r.spot and o.spot_price is not None
        if _allowed(o, r, spot, signals):
            price = _price(o, spot, r.nodes, signals)
            score = signals.score(o.cloud, o.region, o.instance_type) or 0.0
            options.append((price, -score, o.region, o.instance_type, Replacement(o, spot, price)))
    if not options:
        return (f"no other {r.cloud} offer of {r.nodes}x{r.count}x{r.gpu} is left (stock, placement score, quota "
                f"or refusals rule out every region)")
    best = min(options, key=lambda t: t[:4])[4]
    cap = r.price_per_hour * (1 + margin)
    if r.price_per_hour > 0 and best.price > cap:
        return (f"the cheapest other {r.cloud} offer of {r.nodes}x{r.count}x{r.gpu}, {best.offering.region} at "
                f"${best.price:.2f}/hr, costs more than the refused ${r.price_per_hour:.2f}/hr + {margin:.0%}")
    return best
