"""The next-best offer for an island a cloud refused at launch (pure): its GPU shape elsewhere, or another that holds it.

The replacement is, first, the cheapest offering of the refused island's GPU shape (GPU type, GPUs per node, nodes:
it holds the model and trains at the same TFLOPs) in another region or on another allowed cloud; else the cheapest
offering of another GPU type or count (the planner's own screening, candidates.py: the smallest node count whose GPUs
hold the model by schemas/memory_model.py) whose nominal TFLOPs (GPUs x peak bf16 x MFU) are at least the refused
island's. Every offer must be allowed by the live signals and the refusals (stock, placement score, quota room, not
refused within its cool-down) and keep the fleet within the run's budget (move_budget.py). A run whose recipe recorded
no budget bounds (launched before 2026-12-05) keeps the old rule: the same shape on the same cloud, at most the
refused island's price + 10 %. When none is left, `Unplaceable` says why and what the user can change (ReplanFailed
on the tape, `yeto status RUN`).
"""
from __future__ import annotations

from dataclasses import dataclass

from yeto.schemas.gpuspec import IslandSpec, format_gpu
from yeto.schemas.memory_model import Workload
from yeto.schemas.offers import OfferRefused
from yeto.services.planner.candidates import NO_CAPACITY_SCORE, Candidate, screen
from yeto.services.planner.catalog import Offering
from yeto.services.planner.gpus import GPUS
from yeto.services.planner.move_budget import RunBounds
from yeto.services.planner.plan import workload_of
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals

MARGIN = 0.10   # the planner's default --price-margin: without a recorded budget, a replacement may cost this much more


@dataclass(frozen=True)
class Replacement:
    offering: Offering
    spot: bool
    price: float          # $/hr for the island (all nodes), the live spot price where known
    nodes: int = 0        # 0: the refused island's node count (the same shape)

    def spec(self, nodes: int) -> dict:
        o = self.offering
        return {"cloud": o.cloud, "gpu": o.gpu, "count": o.count, "nodes": self.nodes or nodes, "region": o.region,
                "spot": self.spot}


def _price(o: Offering, spot: bool, nodes: int, signals: Signals) -> float:
    live = signals.spot_prices.get((o.cloud, o.region, o.instance_type)) if spot else None
    return (live if live is not None else o.spot_price if spot and o.spot_price is not None else o.price) * nodes


def _allowed(o: Offering, r: OfferRefused, spot: bool, signals: Signals, nodes: int) -> bool:
    """Not refused (this offer within its cool-down; the refused region for its shape, or for every shape when the
    account's quota there was spent), in stock, a placement score above 1, and quota room for `nodes` nodes."""
    if signals.refusal(o.cloud, o.region, o.gpu, o.count) or (o.cloud, o.region, o.gpu, o.count) == (
            r.cloud, r.region, r.gpu, r.count) or (r.cause == "quota" and (o.cloud, o.region) == (r.cloud, r.region)):
        return False
    if signals.stock_cap(o.cloud, o.region, o.instance_type, o.gpu) <= 0:
        return False
    score = signals.score(o.cloud, o.region, o.instance_type) if spot else None
    if score is not None and score <= NO_CAPACITY_SCORE:
        return False
    return all(q.limit - q.used >= q.per_island(o.vcpus, o.count, nodes) for q in signals.quotas
               if q.covers(o.cloud, o.region, o.instance_type, o.gpu, spot))


@dataclass(frozen=True)
class Unplaceable:
    """No offer can take the refused island's place: `reason` says why, `advice` what the user can change."""

    reason: str
    advice: str


def _advice(r: OfferRefused, dearer: Replacement | None, signals: Signals, bounded: bool = False) -> str:
    """What to change, as the end of one sentence: the --gpu entry of the dearer offer (when there is one), or another
    GPU shape; or a fleet the planner picks with the regions that refused this shape excluded, under a budget that
    allows it."""
    refused = {region for (cloud, region, gpu, count) in signals.refused if (cloud, gpu, count) == (r.cloud, r.gpu, r.count)}
    regions = sorted({r.region, *refused} - {""})
    exclude = f" with --exclude-regions {','.join(regions)}" if regions else ""
    planner = f"or without --gpu{exclude} so the planner picks the fleet within --budget-per-hour"
    if dearer is not None:
        o = dearer.offering
        entry = format_gpu([IslandSpec(cloud=o.cloud, gpu=o.gpu, count=o.count, nodes=dearer.nodes or r.nodes,
                                       region=o.region)])
        return f"launch again with --gpu {entry} to pay ${dearer.price:.2f}/hr for it, {planner} (raise it to allow that)"
    other = "a --gpu entry whose GPUs hold the model" if bounded else f"a --gpu entry of another GPU type or cloud than " \
                                                                      f"{r.cloud} {r.count}x{r.gpu}"
    return f"launch again with {other}, {planner}"


def nominal_tflops(gpu: str, gpus: int) -> float:
    """GPUs x peak dense bf16 x MFU: an island's throughput before goodput (which differs by cloud, not by shape)."""
    spec = GPUS.get(gpu)
    return gpus * spec.peak_bf16_tflops * spec.mfu if spec is not None else 0.0


def _where_allowed(o: Offering, b: RunBounds) -> bool:
    """The run's --clouds (or its fleet's), --regions and --exclude-regions."""
    region = o.region.lower()
    return ((not b.clouds or o.cloud in b.clouds) and (not b.regions or region in {x.lower() for x in b.regions})
            and region not in {x.lower() for x in b.exclude_regions})


def _same_shape(r: OfferRefused, catalog: list[Offering], signals: Signals, bounds: RunBounds | None) -> list:
    """Offerings of the refused island's GPU shape elsewhere, cheapest first (the refused cloud first at a tie); on the
    refused cloud alone for a run without bounds."""
    options = []
    for o in catalog:
        if (o.gpu, o.count) != (r.gpu, r.count) or not (o.cloud == r.cloud if bounds is None else _where_allowed(o, bounds)):
            continue
        spot = r.spot and o.spot_price is not None
        if _allowed(o, r, spot, signals, r.nodes):
            price = _price(o, spot, r.nodes, signals)
            score = signals.score(o.cloud, o.region, o.instance_type) or 0.0
            options.append((price, o.cloud != r.cloud, -score, o.cloud, o.region, o.instance_type,
                            Replacement(o, spot, price)))
    return [t[-1] for t in sorted(options, key=lambda t: t[:-1])]


def _other_shapes(r: OfferRefused, catalog: list[Offering], signals: Signals, b: RunBounds) -> list[Replacement]:
    """Offerings of another GPU type or count that hold the model (the planner's screening) at no less nominal
    TFLOPs than the refused island, cheapest first; none when the run's model size is not known."""
    if b.workload is None:
        return []
    try:
        req = PlanRequest(**b.workload, budget=1e6, clouds=b.clouds, regions=b.regions,
                          exclude_regions=b.exclude_regions, spot=r.spot, price_margin=b.margin)
        w: Workload = workload_of(req)
    except (ValueError, TypeError):     # a model whose size is not recorded: only the same shape is known to hold it
        return []
    need = nominal_tflops(r.gpu, r.count * r.nodes)
    found = []
    for o in catalog:
        if (o.gpu, o.count) == (r.gpu, r.count):
            continue
        c = screen(o, req, w, signals)
        if isinstance(c, Candidate) and nominal_tflops(o.gpu, c.num_gpus) >= need and _allowed(o, r, c.spot, signals, c.nodes):
            found.append((c.price, -c.tflops, o.cloud, o.region, o.instance_type, Replacement(o, c.spot, c.price, c.nodes)))
    return [t[-1] for t in sorted(found, key=lambda t: t[:-1])]


def _shape(r: OfferRefused) -> str:
    return f"{r.nodes}x{r.count}x{r.gpu}"


def replacement(r: OfferRefused, catalog: list[Offering], signals: Signals,
                bounds: RunBounds | None = None) -> Replacement | Unplaceable:
    """The next-best allowed offering within the run's bounds (the same shape first), or why there is none."""
    if bounds is None:
        return _unbounded(r, catalog, signals)
    room = bounds.room(r.island)
    same = _same_shape(r, catalog, signals, bounds)
    others = _other_shapes(r, catalog, signals, bounds)
    fits = [x for x in same if x.price <= room + 1e-9] or [x for x in others if x.price <= room + 1e-9]
    if fits:
        return fits[0]
    dearer = min(same + others, key=lambda x: x.price, default=None)
    where = "any cloud" if not bounds.clouds else ", ".join(bounds.clouds)
    if dearer is None:
        sized = "" if bounds.workload is not None else " (the model's size is not known here: other shapes untried)"
        return Unplaceable(f"no other offer on {where} of {_shape(r)}, nor of another GPU shape that holds the model at "
                           f"its TFLOPs{sized}, is left (stock, placement score, quota or refusals rule out every one)",
                           _advice(r, None, signals, bounded=True))
    o = dearer.offering
    return Unplaceable(f"the cheapest other offer that holds island {r.island}, {o.cloud}:{dearer.nodes or r.nodes}x"
                       f"{o.count}x{o.gpu}@{o.region} at ${dearer.price:.2f}/hr, would take "
                       f"{bounds.describe(r.island, dearer.price).replace(' within ', ' over ', 1)}",
                       _advice(r, dearer, signals))


def _unbounded(r: OfferRefused, catalog: list[Offering], signals: Signals) -> Replacement | Unplaceable:
    """A run that recorded no budget (an old tape): the same shape on the same cloud, at most the refused price + 10 %."""
    options = _same_shape(r, catalog, signals, None)
    if not options:
        return Unplaceable(f"no other {r.cloud} offer of {_shape(r)} is left (stock, placement score, "
                           f"quota or refusals rule out every region)", _advice(r, None, signals))
    best = options[0]
    cap = r.price_per_hour * (1 + MARGIN)
    if r.price_per_hour > 0 and best.price > cap:
        return Unplaceable(f"the cheapest other {r.cloud} offer of {_shape(r)}, {best.offering.region} "
                           f"at ${best.price:.2f}/hr, costs more than the refused ${r.price_per_hour:.2f}/hr + "
                           f"{MARGIN:.0%}", _advice(r, best, signals))
    return best
