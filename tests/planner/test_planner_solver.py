"""CP-SAT against brute force on small random instances: the same optimum in budget and target modes."""
import itertools
import random

import pytest

from yeto.services.planner.solver import Problem, Shape, flops, money, solve

pytestmark = pytest.mark.timeout(120)


def random_problem(rng: random.Random, mode: str) -> Problem:
    shapes = tuple(Shape(f"s{i}", cost=round(rng.uniform(0.5, 20), 3), tflops=round(rng.uniform(10, 900), 2),
                         max_islands=rng.randint(0, 3), groups=("q",) if rng.random() < 0.5 else (),
                         usage=()) for i in range(rng.randint(1, 4)))
    shapes = tuple(Shape(s.key, s.cost, s.tflops, s.max_islands, s.groups, (rng.choice([8, 16, 96]),) if s.groups else ())
                   for s in shapes)
    caps = {"q": rng.choice([8, 32, 100, 1000])}
    if mode == "budget":
        return Problem(shapes, budget=rng.uniform(1, 60), max_islands=rng.randint(1, 5), group_caps=caps)
    return Problem(shapes, target_tflops=rng.uniform(50, 1200), budget=rng.choice([None, 40.0]),
                   max_islands=rng.randint(1, 5), group_caps=caps)


def brute_force(p: Problem):
    """Best (primary, secondary) over every count vector, in the solver's integer units."""
    best = None
    for counts in itertools.product(*(range(min(s.max_islands, p.max_islands) + 1) for s in p.shapes)):
        if sum(counts) > p.max_islands:
            continue
        cost = sum(money(s.cost) * c for s, c in zip(p.shapes, counts))
        tf = sum(flops(s.tflops) * c for s, c in zip(p.shapes, counts))
        if p.budget is not None and cost > int(round(p.budget * 1000, 6) // 1):
            continue
        if p.target_tflops is not None and tf < -(-round(p.target_tflops * 100, 6) // 1):
            continue
        used = sum(s.usage[0] * c for s, c in zip(p.shapes, counts) if s.groups)
        if used > p.group_caps["q"]:
            continue
        key = (tf, -cost) if p.target_tflops is None else (-cost, tf)
        best = key if best is None or key > best else best
    return best


@pytest.mark.parametrize("mode", ["budget", "target"])
def test_solver_matches_brute_force_on_random_instances(mode):
    rng = random.Random(1234 if mode == "budget" else 4321)
    checked_feasible = 0
    for _ in range(60):
        p = random_problem(rng, mode)
        want = brute_force(p)
        sol = solve(p)
        if want is None or want == (0, 0):
            assert sol.status == "INFEASIBLE" or not any(sol.counts)
            continue
        checked_feasible += 1
        assert sol.status == "OPTIMAL" and sol.gap == 0.0
        tf = sum(flops(s.tflops) * c for s, c in zip(p.shapes, sol.counts))
        cost = sum(money(s.cost) * c for s, c in zip(p.shapes, sol.counts))
        assert ((tf, -cost) if mode == "budget" else (-cost, tf)) == want
    assert checked_feasible >= 20


def test_ties_on_tflops_are_broken_on_cost():
    p = Problem((Shape("dear", 10.0, 100.0, 2), Shape("cheap", 7.0, 100.0, 2)), budget=100.0, max_islands=2)
    sol = solve(p)
    assert sol.counts == (0, 2) and sol.cost == 14.0


def test_binding_constraints_are_reported():
    p = Problem((Shape("a", 5.0, 100.0, 2, ("q",), (8,)),), budget=100.0, max_islands=5, group_caps={"q": 16})
    sol = solve(p)
    assert sol.counts == (2,)
    assert any(b.startswith("quota q") for b in sol.binding) and any(b.startswith("stock a") for b in sol.binding)
    assert any(b.startswith("max islands") for b in solve(Problem(p.shapes, budget=100.0, max_islands=1)).binding)
    assert any(b.startswith("budget") for b in solve(Problem(p.shapes, budget=7.0, max_islands=5)).binding)
