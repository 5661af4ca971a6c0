"""Candidate island shapes from catalog offerings, and a reason for every offering that cannot be one (pure)."""
from __future__ import annotations

from dataclasses import dataclass

from yeto.schemas.memory_model import USABLE_FRACTION, Need, Workload
from yeto.services.planner.catalog import Offering
from yeto.services.planner.expert_memory import MoeSplit, island_fit, moe_split
from yeto.services.planner.gpus import GPUS, NO_NF4, spot_goodput
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals

# Every reason a shape is rejected, by code (tests reach each one).
REASONS = {
    "cloud": "cloud not in --clouds",
    "region": "region not in --regions",
    "excluded": "region in --exclude-regions",
    "unknown_gpu": "no peak TFLOPs on record for this GPU",
    "no_bf16": "no bf16 tensor cores",
    "no_nf4": "--base-quantization nf4 needs bitsandbytes, which islands of this GPU do not install",
    "memory": "model does not fit",
    "quota": "quota minus current usage leaves no room",
    "stock": "out of stock",
    "budget": "one island costs more than the budget",
    "duplicate": "same --gpu entry as a cheaper instance type",
}
NODE_OPTIONS = (1, 2, 4, 8)
# AWS: "a score of 1 means that your Spot request is not at all likely to succeed" (GetSpotPlacementScores docs)
NO_CAPACITY_SCORE = 1.0


@dataclass(frozen=True)
class Candidate:
    offering: Offering
    spot: bool
    nodes: int
    price: float          # $/hr per island at catalog price (all nodes)
    tflops: float         # effective TFLOPs per island
    need: Need
    max_islands: int
    quotas: tuple[tuple[str, float, float], ...] = ()   # (quota key, room left, units per island)

    @property
    def num_gpus(self) -> int:
        return self.offering.count * self.nodes

    @property
    def entry_key(self) -> tuple[str, str, str, int, int]:
        o = self.offering
        return (o.cloud, o.region, o.gpu, o.count, self.nodes)

    def label(self) -> str:
        o = self.offering
        nodes = f"{self.nodes}x" if self.nodes > 1 else ""
        capacity = "spot" if self.spot else "on-demand"
        return f"{o.cloud}:{nodes}{o.count}x{o.gpu.lower()}@{o.region} ({o.instance_type}, {capacity})"


@dataclass(frozen=True)
class Rejection:
    shape: str
    code: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"shape": self.shape, "code": self.code, "reason": self.reason}


def _label(o: Offering) -> str:
    return f"{o.cloud}:{o.count}x{o.gpu.lower()}@{o.region} ({o.instance_type})"


def _reject(o: Offering, code: str, detail: str = "") -> Rejection:
    return Rejection(_label(o), code, REASONS[code] + (f": {detail}" if detail else ""))


def screen(o: Offering, req: PlanRequest, w: Workload, signals: Signals) -> Candidate | Rejection:
    """One offering as a candidate (smallest node count that holds the model), or why it cannot be one."""
    if req.clouds and o.cloud not in req.clouds:
        return _reject(o, "cloud", o.cloud)
    if o.region.lower() in {r.lower() for r in req.exclude_regions}:
        return _reject(o, "excluded", o.region)
    if req.regions and o.region.lower() not in {r.lower() for r in req.regions}:
        return _reject(o, "region", o.region)
    spec = GPUS.get(o.gpu)
    if spec is None:
        return _reject(o, "unknown_gpu", o.gpu)
    if spec.peak_bf16_tflops <= 0:
        return _reject(o, "no_bf16", o.gpu)
    if w.base_quantization == "nf4" and o.gpu in NO_NF4:
        return _reject(o, "no_nf4", o.gpu)
    split = moe_split(req.moe) if req.moe is not None else None
    tried = [(nodes, *island_fit(w, split, o.count * nodes, spec.memory_gb))
             for nodes in NODE_OPTIONS if nodes <= req.max_nodes]
    fit = next(((nodes, need) for nodes, ok, need in tried if ok and need is not None), None)
    if fit is None:
        return _reject(o, "memory", _no_fit(o, spec.memory_gb, split, tried))
    nodes, need = fit
    spot = req.spot and o.spot_price is not None
    live = signals.spot_prices.get((o.cloud, o.region, o.instance_type)) if spot else None
    price = (live if live is not None else o.spot_price if spot and o.spot_price is not None else o.price) * nodes
    score = signals.score(o.cloud, o.region, o.instance_type) if spot else None
    if score is not None and score <= NO_CAPACITY_SCORE:
        return _reject(o, "stock", f"spot placement score {score:g}/10 in {o.region}: a spot request is not "
                                   f"likely to succeed")
    goodput = spot_goodput(o.cloud, placement_score=score) if spot else 1.0
    tflops = o.count * nodes * spec.peak_bf16_tflops * spec.mfu * goodput
    if why := signals.refusal(o.cloud, o.region, o.gpu, o.count):
        return _reject(o, "stock", why)
    cap = signals.stock_cap(o.cloud, o.region, o.instance_type, o.gpu)
    if cap <= 0:
        return _reject(o, "stock", f"{o.cloud} reports no {o.gpu} ({o.instance_type}) capacity in {o.region}")
    quotas = []
    for q in signals.quotas:
        if q.covers(o.cloud, o.region, o.instance_type, o.gpu, spot):
            per_island = q.per_island(o.vcpus, o.count, nodes)
            room = q.limit - q.used
            if room < per_island:
                return _reject(o, "quota", f"{q.key}: {room:g} left, one island needs {per_island:g}")
            quotas.append((q.key, room, per_island))
    return Candidate(o, spot, nodes, price, tflops, need, cap, tuple(quotas))


def _no_fit(o: Offering, memory_gb: float, split: MoeSplit | None, tried: list[tuple[int, bool, Need | None]]) -> str:
    sized = [(nodes, need) for nodes, _, need in tried if need is not None]
    if not sized:
        assert split is not None
        return f"its {split.experts} experts split evenly over none of {[n * o.count for n, _, _ in tried]} GPUs"
    nodes, need = sized[-1]
    ranks = f" as {nodes * o.count} expert-parallel ranks" if split is not None else ""
    return (f"needs {need.total_gb:.1f} GB per GPU on {nodes}x{o.count} GPUs{ranks}, a {o.gpu} holds "
            f"{memory_gb * USABLE_FRACTION:.1f} GB usable")


def over_budget(c: Candidate, req: PlanRequest) -> Rejection | None:
    cost = c.price * (1 + req.price_margin)
    if req.budget is None or cost + req.head_price <= req.budget:
        return None
    return Rejection(c.label(), "budget", f"{REASONS['budget']}: ${cost:.2f}/hr with margin + head "
                                          f"${req.head_price:.2f}/hr > ${req.budget:.2f}/hr")


def dedupe(cands: list[Candidate]) -> tuple[list[Candidate], list[Rejection]]:
    """Keep the cheapest instance type per `--gpu` entry: that entry is all the launcher will be told."""
    best: dict[tuple[str, str, str, int, int], Candidate] = {}
    for c in sorted(cands, key=lambda c: (c.price, -c.tflops, c.offering.instance_type)):
        best.setdefault(c.entry_key, c)
    kept = [c for c in cands if best[c.entry_key] is c]
    dropped = [Rejection(c.label(), "duplicate", f"{REASONS['duplicate']}: {best[c.entry_key].offering.instance_type}")
               for c in cands if best[c.entry_key] is not c]
    return kept, dropped
