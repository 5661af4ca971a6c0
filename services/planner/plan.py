"""`plan_fleet(request, catalog, signals) -> FleetPlan`: screen offerings, solve exactly, explain the result (pure).

The `--json` shape of a plan is `FleetPlan.to_dict()`; its keys are listed in docs/PLANNER.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from yeto.infra.model_source import resolve_model
from yeto.schemas.gpuspec import IslandSpec, format_gpu
from yeto.schemas.head_size import HeadChoice, HeadTooSmall, choose_head, head_nodes_line, trainable_of
from yeto.schemas.head_throughput import HeadSize, inner_steps_to_fit, lag_refusal
from yeto.schemas.memory_model import Workload
from yeto.schemas.recipe import SyncConfig
from yeto.services.planner.candidates import Candidate, dedupe, over_budget, screen
from yeto.services.planner.catalog import Offering
from yeto.services.planner.estimate import fleet_rounds
from yeto.services.planner.expert_memory import moe_split
from yeto.services.planner.explain import launch_line, why_not
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals
from yeto.services.planner.solver import Problem, Shape, solve


@dataclass(frozen=True)
class FleetPlan:
    """The fleet the planner chose (or why none fits): what `yeto shape` prints and FleetPlanned carries."""

    feasible: bool
    mode: str                                   # budget or target
    islands: tuple[dict[str, Any], ...] = ()
    islands_price_per_hour: float = 0.0
    head_price_per_hour: float = 0.0
    total_tflops: float = 0.0
    binding: tuple[str, ...] = ()
    rejected: tuple[dict[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    gpu: str = ""
    launch_command: str = ""
    status: str = ""
    gap: float = 0.0
    solve_seconds: float = 0.0
    reason: str = ""
    cheapest: dict[str, Any] | None = None
    head: dict[str, Any] | None = None          # the head VM planned for the syncer (schemas/head_size.py)
    signals: tuple[dict[str, Any], ...] = ()    # every live signal read (value, age, source) and each assumption
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_price_per_hour(self) -> float:
        return self.islands_price_per_hour + self.head_price_per_hour

    def to_dict(self) -> dict[str, Any]:
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items() if k != "extra"}
        d["total_price_per_hour"] = round(self.total_price_per_hour, 4)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FleetPlan:
        """The plan a FleetPlanned event carries (tolerant reader: keys it does not know are ignored)."""
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known}
        return cls(**values)


def island_dict(c: Candidate) -> dict[str, Any]:
    o = c.offering
    return {"cloud": o.cloud, "region": o.region, "instance_type": o.instance_type, "gpu": o.gpu,
            "count": o.count, "nodes": c.nodes, "spot": c.spot, "price_per_hour": round(c.price, 4),
            "tflops": round(c.tflops, 2), "memory_per_gpu_gb": round(c.need.total_gb, 2)}


def head_dict(h: HeadChoice, rounds: HeadSize | None = None, *, num_syncers: int = 1, nodes: int = 1,
              given: float | None = None, inner_steps: int | None = None, lagging: HeadSize | None = None) -> dict[str, Any]:
    """The head planned; `nodes` VMs of it, each at h.price(`given`) (--head-price), with what they buy; its rounds at
    `inner_steps` (H), and `lagging`, the rounds at the default H that no head kept up with, where H was raised."""
    out = {"vm": h.vm.name, "memory_gb": h.vm.memory_gb, "vcpus": h.vm.vcpus, "price_per_hour": h.vm.price_per_hour,
           "need_gb": round(h.need_gb, 1), "syncer_gb": round(h.syncer.head / 1e9, 2), "describe": h.describe(),
           "nodes": nodes, "buys": head_nodes_line(nodes, h.price(h.vm.price_per_hour if given is None else given))}
    if rounds is not None:
        out["rounds"] = {"fits": rounds.fits, "syncers": rounds.instances, "threads": rounds.cores,
                         "round_s": round(rounds.round_s, 4), "busy_s": round(rounds.busy_s, 4),
                         "interval_s": round(rounds.interval_s, 2), "sync_every": inner_steps,
                         "describe": rounds_sentence(rounds, num_syncers, inner_steps=inner_steps, lagging=lagging)}
    return out


def rounds_sentence(r: HeadSize, num_syncers: int, *, inner_steps: int | None = None,
                    lagging: HeadSize | None = None) -> str:
    """What the head's rounds take against the fleet's interval (schemas/head_throughput.py's model), and the
    --syncers that keeps them inside it; where the default H was raised so that they fit, by how much and why."""
    if not r.fits:
        return f"its rounds do not keep up: {r.reason}"
    h = f"H {inner_steps} " if inner_steps is not None else "H "
    said = (f"{r.instances} syncer{'s' if r.instances > 1 else ''} x {r.cores} thread{'s' if r.cores > 1 else ''}: "
            f"{r.busy_s:.3g} s of rounds per {r.interval_s:.3g} s interval of the fleet ({h}inner steps)")
    said += f"; launch with --syncers {r.instances}" if r.instances > num_syncers else ""
    if lagging is not None:
        said = (f"at the default H {SyncConfig.inner_steps} no head keeps up ({lagging.reason}), so this plan syncs every "
                f"{inner_steps} inner steps (--sync-every {inner_steps}): " + said)
    return said


def head_rounds_kept_up(req: PlanRequest, w: Workload, chosen: list[Candidate]) -> tuple[HeadSize, int, HeadSize | None]:
    """The head's rounds and the H they are at: the request's H; where no head keeps up at the default H, the fewest
    inner steps at which one does, with the rounds at the default that lagged. A given H that lags comes back as it is
    (not `fits`)."""
    inner_steps = req.inner_steps if req.inner_steps is not None else SyncConfig.inner_steps
    rounds = head_rounds(req, w, chosen, req.sync(inner_steps))
    if rounds.fits or req.inner_steps is not None:
        return rounds, inner_steps, None
    needed = inner_steps_to_fit(rounds, inner_steps)
    return head_rounds(req, w, chosen, req.sync(needed)), needed, rounds


def head_rounds(req: PlanRequest, w: Workload, chosen: list[Candidate], sync: SyncConfig) -> HeadSize:
    """The head's compute for this fleet: the interval is H inner steps of the slowest island at the planner's
    throughput model (estimate.py, the same numbers as the ETA)."""
    return fleet_rounds(w.weights_gb, req.tuning, req.seq_len * req.micro_batch, [island_dict(c) for c in chosen], sync)


def workload_of(req: PlanRequest) -> Workload:
    if req.weights_gb is None and req.moe is not None:     # an MoE's config counts every parameter
        return Workload(weights_gb=moe_split(req.moe).total * 2 / 1e9, tuning=req.tuning, seq_len=req.seq_len,
                        micro_batch=req.micro_batch)
    weights = req.weights_gb if req.weights_gb is not None else resolve_model(req.model).weights_gb
    if weights is None:
        raise ValueError(f"the size of {req.model} is resolved from the Hub at plan time; pass --weights-gb "
                         f"(bf16 GB = 2 x billions of parameters) when planning offline")
    return Workload(weights_gb=weights, tuning=req.tuning, base_quantization=req.base_quantization,
                    seq_len=req.seq_len, micro_batch=req.micro_batch)


def plan_fleet(req: PlanRequest, catalog: list[Offering], signals: Signals) -> FleetPlan:
    w = workload_of(req)
    screened = [screen(o, req, w, signals) for o in catalog]
    fitting = [c for c in screened if isinstance(c, Candidate)]
    rejected = [r for r in screened if not isinstance(r, Candidate)]
    fitting, dupes = dedupe(fitting)
    priced_out = [(c, over_budget(c, req)) for c in fitting]
    cands = [c for c, r in priced_out if r is None]
    rejected += dupes + [r for _, r in priced_out if r is not None]
    mode = "budget" if req.flops is None else "target"
    common: dict[str, Any] = dict(mode=mode, rejected=tuple(r.to_dict() for r in rejected), warnings=signals.warnings,
                  head_price_per_hour=req.head_price * req.head_nodes, signals=tuple(r.to_dict() for r in signals.readings))
    cheapest = min(fitting, key=lambda c: c.price, default=None)
    cheapest_d = island_dict(cheapest) if cheapest else None
    groups: dict[str, float] = {}
    for c in cands:
        groups.update({k: room for k, room, _ in c.quotas})
    shapes = tuple(Shape(c.label(), c.price * (1 + req.price_margin), c.tflops, c.max_islands,
                         tuple(k for k, _, _ in c.quotas), tuple(u for _, _, u in c.quotas)) for c in cands)
    head_price = req.head_price * req.head_nodes       # every VM of the head at the head type's price
    for _ in range(2):      # a head larger than --head-price's costs more: solve again with its price off the budget
        problem = Problem(shapes=shapes, budget=None if req.budget is None else req.budget - head_price,
                          target_tflops=req.flops, max_islands=req.max_islands, group_caps=groups)
        sol = solve(problem, time_limit_s=req.time_limit_s) if cands else None
        if sol is None or sol.status == "INFEASIBLE" or not any(sol.counts):
            return FleetPlan(feasible=False, reason=why_not(req, cheapest), cheapest=cheapest_d, **common)
        chosen = [c for c, n in zip(cands, sol.counts) for _ in range(n)]
        rounds, inner_steps, lagging = head_rounds_kept_up(req, w, chosen)
        try:
            head = choose_head(trainable_of(w.weights_gb, req.tuning), num_learners=len(chosen), sync=req.sync(inner_steps),
                               num_syncers=req.num_syncers, memory_gb=req.head_memory_gb, cores=rounds.total_cores)
        except HeadTooSmall as e:
            return FleetPlan(feasible=False, reason=str(e), cheapest=cheapest_d, **common)
        if req.budget is None or head.price(req.head_price) * req.head_nodes <= head_price:
            break
        head_price = head.price(req.head_price) * req.head_nodes    # fewer islands then: the head needed is no larger
    assert sol is not None
    if not rounds.fits:         # a given --sync-every at which no head keeps up: refused before anything is rented
        return FleetPlan(feasible=False, reason=lag_refusal(rounds, inner_steps, "plan"), cheapest=cheapest_d, **common)
    common.update(head=head_dict(head, rounds, num_syncers=req.num_syncers, nodes=req.head_nodes, given=req.head_price,
                                 inner_steps=inner_steps, lagging=lagging),
                  head_price_per_hour=head.price(req.head_price) * req.head_nodes)
    specs = [IslandSpec(cloud=c.offering.cloud, gpu=c.offering.gpu, count=c.offering.count, nodes=c.nodes,
                        region=c.offering.region) for c in chosen]
    gpu = format_gpu(specs)
    return FleetPlan(feasible=True, islands=tuple(island_dict(c) for c in chosen),
                islands_price_per_hour=round(sum(c.price for c in chosen), 4),
                total_tflops=round(sum(c.tflops for c in chosen), 2), binding=sol.binding, gpu=gpu,
                launch_command=launch_line(req, gpu, sync_every=inner_steps if lagging else None,
                                           syncers=rounds.instances if rounds.fits else None),
                status=sol.status, gap=sol.gap,
                solve_seconds=round(sol.solve_seconds, 4), cheapest=cheapest_d, **common)
