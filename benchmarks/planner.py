"""Planner benchmark: CP-SAT time to a proven optimum on a five-cloud catalog, and the plan's TFLOPs per dollar
against the best single-shape fleet under the same budget. Last line: `name=value`.

The catalog is the fixture (real SkyPilot rows for aws, gcp, azure, lambda, runpod) read through SkyPilot's
API, then widened to many regions with seeded price jitter so the solver sees a realistic number of shapes.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time

from yeto.services.planner.api import FIXTURE_DIR, PlanRequest, Signals, load_catalog, plan_fleet

MODELS = ("qwen35-9b", "llama31-70b")
BUDGETS = (20.0, 40.0, 80.0, 160.0)


def widened(catalog, copies: int, seed: int = 0):
    rng = random.Random(seed)
    out = list(catalog)
    for k in range(copies):
        for o in catalog:
            f = rng.uniform(0.8, 1.3)
            out.append(dataclasses.replace(o, region=f"{o.region}-x{k}", price=round(o.price * f, 4),
                                           spot_price=None if o.spot_price is None
                                           else round(o.spot_price * f * rng.uniform(0.7, 1.3), 4)))
    return out


def best_single_shape(plan_req: PlanRequest, catalog, signals):
    """The best fleet built from copies of one shape: each candidate alone, the solver restricted to it."""
    best = None
    for o in catalog:
        p = plan_fleet(plan_req, [o], signals)
        if p.feasible and (best is None or (p.total_tflops, -p.total_price_per_hour)
                           > (best.total_tflops, -best.total_price_per_hour)):
            best = p
    return best


def main(copies: int = 15) -> None:
    t0 = time.perf_counter()
    base = load_catalog(catalog_dir=FIXTURE_DIR)
    print(f"catalog: {len(base)} offerings from {len({o.cloud for o in base})} clouds via SkyPilot "
          f"({time.perf_counter() - t0:.1f} s)")
    big = widened(base, copies=copies)
    print(f"widened catalog: {len(big)} offerings, {len({(o.cloud, o.region) for o in big})} cloud-regions")
    signals = Signals(default_stock_cap=4)
    times, ratios, tf_ratios = [], [], []
    for model in MODELS:
        for budget in BUDGETS:
            req = PlanRequest(model=model, budget=budget, max_islands=16)
            plan = plan_fleet(req, big, signals)
            if not plan.feasible:
                continue
            assert plan.status == "OPTIMAL", plan.status
            times.append(plan.solve_seconds)
            single = best_single_shape(req, big, signals)
            r = (plan.total_tflops / plan.total_price_per_hour) / (single.total_tflops / single.total_price_per_hour)
            ratios.append(r)
            tf_ratios.append(plan.total_tflops / single.total_tflops)
            print(f"{model:<12} budget ${budget:>6.0f}/hr: "
                  f"plan {plan.total_tflops:>9.0f} TFLOPs ${plan.total_price_per_hour:>7.2f}/hr "
                  f"in {plan.solve_seconds * 1000:6.1f} ms ({len(plan.islands)} islands) | best single shape "
                  f"{single.total_tflops:>9.0f} TFLOPs ${single.total_price_per_hour:>7.2f}/hr | "
                  f"TFLOPs/$ x{r:.3f}, TFLOPs x{tf_ratios[-1]:.3f}")
    print(f"solve time to proven optimum: median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms (target <= 1000 ms)")
    print(f"plan_vs_single_shape_tflops={statistics.geometric_mean(tf_ratios):.3f}")
    print(f"planner_max_solve_ms={max(times) * 1000:.1f}")
    print(f"plan_vs_single_shape_tflops_per_dollar={statistics.geometric_mean(ratios):.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=15,
                    help="how many jittered copies of every catalog row widen the catalog (default 15)")
    a = ap.parse_args()
    if a.copies < 0:
        ap.error(f"--copies: 0 or more (got {a.copies})")
    main(a.copies)
