"""`yeto shape`'s text: the fleet with identical islands grouped (`3×`), prices one way (the margin included, said once)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from yeto.services.planner.api import FleetPlan


def _entry(i: dict[str, Any]) -> str:
    nodes = f"{i['nodes']}x" if i["nodes"] > 1 else ""
    return f"{i['cloud']}:{nodes}{i['count']}x{i['gpu'].lower()}@{i['region']}"


def grouped(islands: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(how many, island) per distinct offering, in plan order: three identical islands read as one `3×` row."""
    groups: dict[tuple, list] = {}
    for i in islands:
        key = (_entry(i), i["instance_type"], i["spot"], i["price_per_hour"], i["tflops"], i["memory_per_gpu_gb"])
        groups.setdefault(key, [0, i])[0] += 1
    return [(n, i) for n, i in groups.values()]


def render(plan: FleetPlan, model: str, margin: float = 0.0) -> str:
    """The plan as text; island prices are the catalog's plus `margin` (the planner budgets with it), so the
    table, the total and the binding budget line are one kind of dollar."""
    up = 1 + margin
    lines = [f"Fleet for {model} ({plan.mode} mode): {plan.status}, solved in {plan.solve_seconds:.3f} s"
             + (f", gap {plan.gap:.1%}" if plan.gap else "")]
    lines.append(f"  {'n':>3}  {'entry':<28} {'instance':<26} {'capacity':<9} {'$/hr each':>9} {'TFLOPs each':>11} "
                 f"{'GB/GPU':>7}")
    for n, i in grouped(plan.islands):
        lines.append(f"  {n:>2}×  {_entry(i):<28} {i['instance_type']:<26} {'spot' if i['spot'] else 'on-demand':<9} "
                     f"{i['price_per_hour'] * up:>9.2f} {i['tflops']:>11.1f} {i['memory_per_gpu_gb']:>7.1f}")
    total = plan.islands_price_per_hour * up + plan.head_price_per_hour
    nodes = (plan.head or {}).get("nodes", 1)
    lines.append(f"       {'head (on-demand' + (f', {nodes} VMs)' if nodes > 1 else ')'):<64} {plan.head_price_per_hour:>9.2f}")
    if plan.head:
        lines.append(f"  the syncer fits: {plan.head['describe']}")
        if buys := plan.head.get("buys"):
            lines.append(f"  {buys}")
        if rounds := plan.head.get("rounds"):
            lines.append(f"  the head's rounds: {rounds['describe']}")
    lines.append(f"       {'total':<64} {total:>9.2f} {plan.total_tflops:>11.1f}  effective")
    if margin:
        lines.append(f"  $/hr include the {margin:.0%} price margin (--price-margin) on catalog prices; the head's is flat")
    lines += ["Binding constraints:"] + [f"  - {b}" for b in plan.binding or ["none"]]
    lines += [f"Rejected shapes ({len(plan.rejected)}):"] + [f"  - {r['shape']}: {r['reason']}" for r in plan.rejected]
    lines.append(signals_summary(plan.signals))
    lines += ["Warnings:"] + [f"  - {w}" for w in plan.warnings or ["none"]]
    lines += ["Launch it with:", f"  {plan.launch_command}"]
    return "\n".join(lines)


def _signal_value(r: dict[str, Any]) -> str:
    v = r["value"]
    if r["signal"] == "quota":
        return f"{v['limit'] - v['used']:g} left ({v['limit']:g} - {v['used']:g} used)"
    if r["signal"] == "placement_score":
        return f"{v:g}/10"
    if r["signal"] == "spot_price":
        return f"${v:.4f}/hr"
    if r["signal"] == "stock":
        label = v.get("stockStatus") or ("capacity" if v.get("capacity") else "none")
        return f"{label}: {v['islands']} islands"
    return str(v)


def _age(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def signals_summary(signals: Sequence[dict[str, Any]]) -> str:
    """One line: how many live values of each kind per cloud, the oldest answer's age, and the clouds assumed."""
    counts: dict[str, dict[str, int]] = {}
    ages = [r["age_s"] for r in signals if r["age_s"] is not None]
    for r in signals:
        if r["signal"] != "assumption":
            counts.setdefault(r["cloud"], {}).setdefault(r["signal"], 0)
            counts[r["cloud"]][r["signal"]] += 1
    live = "; ".join(f"{c} " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(kinds.items()))
                     for c, kinds in sorted(counts.items()))
    assumed = sorted({r["cloud"] for r in signals if r["signal"] == "assumption"})
    return (f"Live signals: {live or 'none'}" + (f" (oldest {_age(max(ages))})" if ages else "")
            + (f"; assumed for {', '.join(assumed)}" if assumed else "") + " (--explain-signals lists each)")


def render_signals(signals: Sequence[dict[str, Any]]) -> str:
    """`--explain-signals`: every live signal the plan read (value, age of the answer, source) and each assumption."""
    lines = [f"Signals ({len(signals)}):"]
    if not signals:
        lines.append("  none: no cloud in the plan's catalog")
    for r in signals:
        if r["signal"] == "assumption":
            lines.append(f"  {r['cloud']:<7} assumption: {r['value']}")
            continue
        lines.append(f"  {r['cloud']:<7} {r['signal']:<15} {r['key']:<34} {_signal_value(r):<30} "
                     f"age {_age(r['age_s']):>6}  from {r['source']}")
    return "\n".join(lines)


def estimate(tokens: int, epochs: float, weights_gb: float, tflops: float, tuning: str, usd_per_hour: float) -> str:
    """How long and how much: the data's tokens over the fleet's effective TFLOPs at 6 FLOPs per parameter and token
    (full fine-tuning) or 4 (LoRA: no weight gradients); DiLoCo's sync and preemptions come on top."""
    params = weights_gb * 1e9 / 2                       # bf16: two bytes per parameter
    per_token = (6 if tuning == "full" else 4) * params
    tok_s = tflops * 1e12 / per_token
    hours = tokens * epochs / tok_s / 3600
    return (f"Estimate: {tokens:,} tokens x {epochs:g} epoch(s) at ~{tok_s:,.0f} tokens/s ({per_token / params:.0f} "
            f"FLOPs per parameter and token) = {hours:.2f} h, ${hours * usd_per_hour:.2f} at ${usd_per_hour:.2f}/hr "
            f"(before sync overhead and preemptions)")
