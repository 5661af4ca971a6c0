"""The exact fleet solver: an integer program over island counts per candidate shape, solved by OR-Tools CP-SAT.

Budget mode: maximise effective TFLOPs subject to cost <= budget, then (ties) minimise cost at that optimum.
Target mode: minimise cost subject to TFLOPs >= target (and cost <= budget if given), then maximise TFLOPs.
Both phases are solved to proven optimality; money is in integer milli-dollars per hour (prices rounded up,
budgets down, so the plan never exceeds the budget), TFLOPs in integer hundredths (rounded down).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model


@dataclass(frozen=True)
class Shape:
    """One candidate island shape: its per-island cost (with margin) and effective TFLOPs, and its caps."""

    key: str
    cost: float                 # $/hr per island, margin included
    tflops: float               # effective TFLOPs per island
    max_islands: int            # stock / placement cap
    groups: tuple[str, ...] = ()   # quota groups the shape draws from
    usage: tuple[float, ...] = ()  # units drawn from each group per island


@dataclass(frozen=True)
class Problem:
    shapes: tuple[Shape, ...]
    budget: float | None = None          # $/hr for the islands (the head's cost already taken off)
    target_tflops: float | None = None
    max_islands: int = 16
    group_caps: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Solution:
    counts: tuple[int, ...]
    status: str                  # OPTIMAL, FEASIBLE or INFEASIBLE
    cost: float
    tflops: float
    gap: float                   # relative gap of the primary objective (0 when proven optimal)
    solve_seconds: float
    binding: tuple[str, ...]


def money(x: float) -> int:
    return math.ceil(round(x * 1000, 6))


def flops(x: float) -> int:
    return math.floor(round(x * 100, 6))


def _model(p: Problem):
    m = cp_model.CpModel()
    x = [m.NewIntVar(0, min(s.max_islands, p.max_islands), s.key) for s in p.shapes]
    cost = sum(money(s.cost) * xi for s, xi in zip(p.shapes, x))
    tf = sum(flops(s.tflops) * xi for s, xi in zip(p.shapes, x))
    m.Add(sum(x) <= p.max_islands)
    if p.budget is not None:
        m.Add(cost <= math.floor(round(p.budget * 1000, 6)))
    if p.target_tflops is not None:
        m.Add(tf >= math.ceil(round(p.target_tflops * 100, 6)))
    for g, cap in p.group_caps.items():
        draws = [(s.usage[s.groups.index(g)], xi) for s, xi in zip(p.shapes, x) if g in s.groups]
        if draws:
            m.Add(sum(math.ceil(u) * xi for u, xi in draws) <= math.floor(cap))
    return m, x, cost, tf


def _solve(m: cp_model.CpModel, time_limit_s: float):
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = time_limit_s
    s.parameters.num_workers = 1   # deterministic, and the machine has few cores
    return s, s.Solve(m)


def solve(p: Problem, *, time_limit_s: float = 10.0) -> Solution:
    start = time.perf_counter()
    m, x, cost, tf = _model(p)
    primary, secondary = (tf, cost) if p.target_tflops is None else (cost, tf)
    maximise_first = p.target_tflops is None
    m.Maximize(primary) if maximise_first else m.Minimize(primary)
    s, status = _solve(m, time_limit_s)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Solution((), "INFEASIBLE", 0.0, 0.0, 0.0, time.perf_counter() - start, ())
    best, bound = s.ObjectiveValue(), s.BestObjectiveBound()
    gap = abs(bound - best) / max(abs(bound), 1e-9)
    proven = status == cp_model.OPTIMAL
    # Phase 2: hold the primary at its optimum, break ties on the other objective.
    m.ClearObjective()
    m.Add(primary == round(best))
    m.Minimize(secondary) if maximise_first else m.Maximize(secondary)
    s2, status2 = _solve(m, time_limit_s)
    if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        s, proven = s2, proven and status2 == cp_model.OPTIMAL
    counts = tuple(int(s.Value(v)) for v in x)
    total_cost = sum(c * sh.cost for c, sh in zip(counts, p.shapes))
    total_tf = sum(c * sh.tflops for c, sh in zip(counts, p.shapes))
    return Solution(counts, "OPTIMAL" if proven else "FEASIBLE", total_cost, total_tf, 0.0 if proven else gap,
                    time.perf_counter() - start, binding(p, counts))


def binding(p: Problem, counts: tuple[int, ...]) -> tuple[str, ...]:
    """Constraints that stop one more island of some shape from being added."""
    out = []
    spent = sum(c * s.cost for c, s in zip(counts, p.shapes))
    cheapest = min((s.cost for s in p.shapes), default=math.inf)
    if p.budget is not None and spent + cheapest > p.budget + 1e-9:
        out.append(f"budget: ${spent:.2f}/hr of ${p.budget:.2f}/hr for islands used; the cheapest shape costs ${cheapest:.2f}/hr")
    if sum(counts) >= p.max_islands:
        out.append(f"max islands: {p.max_islands} reached")
    for g, cap in p.group_caps.items():
        used = sum(c * s.usage[s.groups.index(g)] for c, s in zip(counts, p.shapes) if g in s.groups)
        least = min((s.usage[s.groups.index(g)] for s in p.shapes if g in s.groups), default=math.inf)
        if used + least > cap + 1e-9:
            out.append(f"quota {g}: {used:g} of {cap:g} available")
    for c, s in zip(counts, p.shapes):
        if c and c >= s.max_islands:
            out.append(f"stock {s.key}: all {s.max_islands} available islands used")
    return tuple(out)
