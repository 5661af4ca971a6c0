"""The next-best offer for an island a cloud refused at launch (pure): the same GPU shape elsewhere, within its price.

A refused island keeps its GPU type, GPUs per node and node count, so it holds the model and trains at the same
TFLOPs wherever it starts; what changes is where. The replacement is the cheapest offering of that shape on the same
cloud (whose credentials the run already uses) that the live signals and the refusals still allow (stock, placement
score, quota room, not refused within its cool-down), priced at most the refused island's price plus the planner's
margin, so the run stays within the budget it was planned under. When none is left, `Unplaceable` says why and
what the user can change (ReplanFailed on the tape, `yeto status RUN`).
"""
from __future__ import annotations

from dataclasses import dataclass

from yeto.schemas.gpuspec import IslandSpec, format_gpu
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
    return all(q.limit - q.used >= q.per_island(o.vcpus, o.count, r.nodes) for q in signals.quotas
               if q.covers(o.cloud, o.region, o.instance_type, o.gpu, spot))


@dataclass(frozen=True)
class Unplaceable:
    """No offer can take the refused island's place: `reason` says why, `advice` what the user can change."""

    reason: str
    advice: str


def _advice(r: OfferRefused, dearer: Replacement | None, signals: Signals) -> str:
    """What to change, as the end of one sentence: the --gpu entry of the dearer offer (when there is one), or another
    GPU shape; or a fleet the planner picks with the regions that refused this shape excluded, under a budget that
    allows it."""
    refused = {region for (cloud, region, gpu, count) in signals.refused if (cloud, gpu, count) == (r.cloud, r.gpu, r.count)}
    regions = sorted({r.region, *refused} - {""})
    exclude = f" with --exclude-regions {','.join(regions)}" if regions else ""
    planner = f"or without --gpu{exclude} so the planner picks the fleet within --budget-per-hour"
    if dearer is not None:
        o = dearer.offering
        entry = format_gpu([IslandSpec(cloud=o.cloud, gpu=o.gpu, count=o.count, nodes=r.nodes, region=o.region)])
        return f"launch again with --gpu {entry} to pay ${dearer.price:.2f}/hr for it, {planner} (raise it to allow that)"
    return f"launch again with a --gpu entry of another GPU type or cloud than {r.cloud} {r.count}x{r.gpu}, {planner}"


def replacement(r: OfferRefused, catalog: list[Offering], signals: Signals,
                margin: float = MARGIN) -> Replacement | Unplaceable:
    """The cheapest allowed offering of the refused island's shape, or why there is none and what to change."""
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
        return Unplaceable(f"no other {r.cloud} offer of {r.nodes}x{r.count}x{r.gpu} is left (stock, placement score, "
                           f"quota or refusals rule out every region)", _advice(r, None, signals))
    best = min(options, key=lambda t: t[:4])[4]
    cap = r.price_per_hour * (1 + margin)
    if r.price_per_hour > 0 and best.price > cap:
        return Unplaceable(f"the cheapest other {r.cloud} offer of {r.nodes}x{r.count}x{r.gpu}, {best.offering.region} "
                           f"at ${best.price:.2f}/hr, costs more than the refused ${r.price_per_hour:.2f}/hr + "
                           f"{margin:.0%}", _advice(r, best, signals))
    return best
