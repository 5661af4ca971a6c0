"""The arms of benchmarks/compare_diloco.py and its table: pure data and arithmetic, no training."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One Yeto arm: changes to the base sync recipe, and the islands' simulated step times."""

    sync: dict = field(default_factory=dict)
    """SyncConfig fields changed from the base recipe."""
    step_s: tuple[float, ...] = ()
    """Relative step time of each island (empty: all 1.0); a straggler makes quorum matter."""
    flush: bool = False
    """Islands push their unsent progress when they finish (a proposed learner change; off = today's learners)."""
    note: str = ""
    """What the arm tests."""


SETTINGS: dict[str, Setting] = {
    "default": Setting(note="the recipe's defaults (schemas/recipe.py SyncConfig)"),
    "alpha0": Setting(sync={"alpha": 0.0}, note="merge alpha 0: overwrite local values with the global"),
    "lr1_nomom": Setting(sync={"outer_lr": 1.0, "momentum": 0.0}, note="outer lr 1 without momentum"),
    "direct": Setting(sync={"outer_lr": 1.0, "momentum": 0.0, "alpha": 0.0}, note="'direct RDA': lr 1, no momentum, alpha 0"),
    "default_flush": Setting(flush=True, note="default recipe; islands push their last partial interval at the end"),
    "direct_flush": Setting(sync={"outer_lr": 1.0, "momentum": 0.0, "alpha": 0.0}, flush=True,
                            note="direct RDA; islands push their last partial interval at the end"),
    "bf16": Setting(sync={"codec_up": "bf16", "codec_down": "bf16"}, note="bf16 pushes and broadcast deltas (vs q4)"),
    "sparse": Setting(sync={"codec_up": "topk2", "codec_down": "topk2"},
                      note="topk2 pushes and broadcast deltas (2 of every 64 values, 2 bits each; vs q4)"),
    "sparse_alpha0": Setting(sync={"codec_up": "topk2", "codec_down": "topk2", "alpha": 0.0},
                             note="topk2 both ways, merge alpha 0 (the learner's residual is all it keeps)"),
    "sparse_direct": Setting(sync={"codec_up": "topk2", "codec_down": "topk2", "outer_lr": 1.0, "momentum": 0.0,
                                   "alpha": 0.0}, note="topk2 both ways, lr 1, no momentum, alpha 0 (SparseLoCo's step)"),
    "sparse4": Setting(sync={"codec_up": "topk4", "codec_down": "topk4"}, note="topk4 both ways (4 of every 64 values)"),
    "sparse4_alpha0": Setting(sync={"codec_up": "topk4", "codec_down": "topk4", "alpha": 0.0},
                              note="topk4 both ways, merge alpha 0"),
    "sparse4_direct": Setting(sync={"codec_up": "topk4", "codec_down": "topk4", "outer_lr": 1.0, "momentum": 0.0,
                                    "alpha": 0.0}, note="topk4 both ways, lr 1, no momentum, alpha 0"),
    "sparse_union": Setting(sync={"codec_up": "topk2", "codec_down": "topk4", "outer_lr": 1.0, "momentum": 0.0,
                                  "alpha": 0.0}, note="topk2 pushes, topk4 broadcast (holds the union of 2 islands' "
                            "pushes), lr 1, no momentum, alpha 0"),
    "sparse_union_b95": Setting(sync={"codec_up": "topk2", "codec_down": "topk4", "outer_lr": 1.0, "momentum": 0.0,
                                      "alpha": 0.0, "feedback_decay": 0.95}, note="sparse_union, error feedback decay 0.95"),
    "sparse_union_a05": Setting(sync={"codec_up": "topk2", "codec_down": "topk4", "outer_lr": 1.0, "momentum": 0.0},
                                note="sparse_union with the default merge alpha 0.5"),
    "sparse4_union": Setting(sync={"codec_up": "topk4", "codec_down": "topk8", "outer_lr": 1.0, "momentum": 0.0,
                                   "alpha": 0.0}, note="topk4 pushes, topk8 broadcast (the union of 2 islands' pushes), "
                             "lr 1, no momentum, alpha 0"),
    "sparse_union_b80": Setting(sync={"codec_up": "topk2", "codec_down": "topk4", "outer_lr": 1.0, "momentum": 0.0,
                                      "alpha": 0.0, "feedback_decay": 0.8}, note="sparse_union, error feedback decay 0.8"),
    "sparse4_union_b90": Setting(sync={"codec_up": "topk4", "codec_down": "topk8", "outer_lr": 1.0, "momentum": 0.0,
                                       "alpha": 0.0, "feedback_decay": 0.9}, note="sparse4_union, error feedback decay 0.9"),
    "sparse4_union_b80": Setting(sync={"codec_up": "topk4", "codec_down": "topk8", "outer_lr": 1.0, "momentum": 0.0,
                                       "alpha": 0.0, "feedback_decay": 0.8}, note="sparse4_union, error feedback decay 0.8"),
    "avg": Setting(sync={"merge": "avg"}, note="plain weighted average instead of RDA"),
    "H12": Setting(sync={"inner_steps": 12}, note="push every 12 inner steps"),
    "H48": Setting(sync={"inner_steps": 48}, note="push every 48 inner steps"),
    "straggler": Setting(step_s=(1.0, 1.5), note="island 1 is 1.5x slower; default quorum (majority)"),
    "straggler_q1": Setting(sync={"quorum": 1}, step_s=(1.0, 1.5), note="island 1 is 1.5x slower; quorum 1"),
}


def pick(spec: str) -> list[str]:
    """`all` or a comma-separated list of setting names."""
    names = list(SETTINGS) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: all, {', '.join(SETTINGS)}")
    return names


def step_times(setting: Setting, islands: int) -> list[float]:
    times = list(setting.step_s) or [1.0]
    return [times[m % len(times)] for m in range(islands)]


def parse_overrides(items: list[str]) -> dict:
    """`key=value` pairs for SyncConfig; values parsed as int, float, None or string."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--recipe {item!r}: write key=value, e.g. --recipe outer_lr=1.0")
        value: object = raw
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                pass
        out[key.strip()] = None if raw == "None" else value
    return out


def spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def deltas_pct(arm: list[float], sync: list[float]) -> list[float]:
    """Per-seed relative difference of held-out CE against the synchronous run of the same seed, in %."""
    return [100.0 * (a - s) / s for a, s in zip(arm, sync)]


def fmt_ci(values: list[float], spec: str = "+.2f") -> str:
    """`mean [lo, hi]` (95% Student t), `value (n=1)` for one value, '-' for none; numbers formatted with `spec`."""
    if not values:
        return "-"
    ci = ci95(values)
    if ci is None:
        return f"{format(values[0], spec)} (n=1)"
    return f"{format(ci[0], spec)} [{format(ci[1], spec)}, {format(ci[2], spec)}]"


def _fmt_steps(runs: list[dict], targets: list[float]) -> str:
    """Steps to the paired target per seed, e.g. `160, 200, not reached` ('-' without curves)."""
    if not all(r.get("curve") for r in runs):
        return "-"
    steps = [steps_to_target(r["curve"], t) for r, t in zip(runs, targets)]
    return ", ".join("not reached" if s is None else str(s) for s in steps)


def table(results: dict[str, list[dict]]) -> list[str]:
    """Markdown rows: arm, lr, n, CE mean ± sd, Δ% vs sync (paired per seed: mean [95% CI, Student t],
    [min, max]), steps to sync's final CE per seed, goodput, MB per learner."""
    sync_runs = results["sync"]
    sync = [r["heldout_ce"] for r in sync_runs]
    lines = ["| arm | lr | n | held-out CE (mean ± sd) | Δ vs sync % (mean [95% CI]) | Δ range % "
             "| steps to sync's CE (per seed) | goodput | up MB/learner | down MB/learner |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, runs in results.items():
        ce = [r["heldout_ce"] for r in runs]
        mean, sd = spread(ce)
        lr = "/".join(sorted({f"{r['lr']:g}" for r in runs if "lr" in r})) or "-"
        steps = _fmt_steps(runs, sync[:len(runs)])
        if name == "sync":
            lines.append(f"| sync | {lr} | {len(ce)} | {mean:.4f} ± {sd:.4f} | 0 | - | {steps} | 1 | - | - |")
            continue
        d = deltas_pct(ce, sync[:len(ce)])
        n = runs[0]["stats"].get("islands", 1)
        gp = statistics.fmean(r["stats"]["goodput"] for r in runs)
        up = statistics.fmean(r["stats"]["bytes_up"] for r in runs) / 1e6 / n
        down = statistics.fmean(r["stats"]["bytes_down"] for r in runs) / 1e6 / n
        lines.append(f"| {name} | {lr} | {len(ce)} | {mean:.4f} ± {sd:.4f} | {fmt_ci(d)} | [{min(d):+.2f}, {max(d):+.2f}] "
                     f"| {steps} | {gp:.3f} | {up:.2f} | {down:.2f} |")
    return lines


def headline(name: str, arm: list[float], sync: list[float]) -> str:
    """The machine-readable last line: `<name>_delta_pct=<mean> ci95=[<lo>,<hi>] n=<seeds>`."""
    d = deltas_pct(arm, sync)
    ci = ci95(d)
    bounds = "[nan,nan]" if ci is None else f"[{ci[1]:+.3f},{ci[2]:+.3f}]"
    return f"{name}_delta_pct={statistics.fmean(d):+.3f} ci95={bounds} n={len(d)}"

# Two-sided 95% quantiles of Student's t, t_{0.975}(df), df = 1..30 (standard tables).
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def t975(df: int) -> float:
    """t_{0.975} with `df` degrees of freedom: the table up to 30, then the Cornish-Fisher expansion
    around the normal quantile (error below 1e-4 there)."""
    if df < 1:
        raise ValueError(f"Student t needs at least 1 degree of freedom, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def ci95(values: list[float]) -> tuple[float, float, float] | None:
    """Mean and 95% confidence interval of the mean (Student t, n - 1 df); None for fewer than 2 values.
    Given paired per-seed differences, this is the paired t-interval."""
    if len(values) < 2:
        return None
    mean, sd = spread(values)
    half = t975(len(values) - 1) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


def parse_lrs(spec: str, flag: str, least: int = 2) -> list[float]:
    """A comma-separated list of at least `least` distinct positive learning rates (a sweep: two)."""
    try:
        lrs = [float(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"{flag} {spec!r}: write learning rates separated by commas, e.g. {flag} 1e-3,3e-3") from None
    if len(lrs) < least or len(set(lrs)) != len(lrs) or min(lrs, default=0) <= 0:
        need = "a sweep needs at least two" if least >= 2 else "give"
        raise ValueError(f"{flag} {spec!r}: {need} distinct positive learning rates")
    return sorted(lrs)


def scaled_warmup(lr: float, base_lr: float, base_warmup: int) -> int:
    """Warmup steps at `lr`: the base recipe's warmup scaled with lr, so the warmup ramps lr at the same
    rate per step (base: `base_warmup` steps up to `base_lr`); at least 1 step when the base has warmup."""
    if base_warmup <= 0:
        return 0
    return max(1, round(base_warmup * lr / base_lr))


def best_lr(sweep: dict[float, list[float]]) -> float:
    """The learning rate with the lowest mean held-out CE over the tuning seeds (ties: the smaller lr)."""
    return min(sorted(sweep), key=lambda lr: statistics.fmean(sweep[lr]))


def sweep_table(arm: str, sweep: dict[float, list[float]], warmups: dict[float, int], seeds: list[int]) -> list[str]:
    """Markdown rows of one arm's lr sweep: per tuning seed CE, mean, the winner marked."""
    best = best_lr(sweep)
    lines = [f"| {arm} lr | warmup | " + " | ".join(f"CE seed {s}" for s in seeds) + " | mean CE |",
             "|---|---|" + "---|" * len(seeds) + "---|"]
    for lr in sorted(sweep):
        mark = " **best**" if lr == best else ""
        lines.append(f"| {lr:g}{mark} | {warmups[lr]} | " + " | ".join(f"{c:.4f}" for c in sweep[lr])
                     + f" | {statistics.fmean(sweep[lr]):.4f} |")
    return lines


def steps_to_target(curve: list[list[float]], target: float) -> int | None:
    """The first evaluated step whose held-out CE is at or below `target`; None if never."""
    return next((int(step) for step, ce in curve if ce <= target), None)
