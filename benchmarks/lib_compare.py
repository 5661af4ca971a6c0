"""The arms of scripts/compare_diloco.py and its table: pure data and arithmetic, no training."""
from __future__ import annotations

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


def table(results: dict[str, list[dict]]) -> list[str]:
    """Markdown rows: arm, CE mean ± sd, Δ% vs sync (mean ± sd, [min, max]), goodput, MB per learner."""
    sync = [r["heldout_ce"] for r in results["sync"]]
    lines = ["| arm | held-out CE | Δ vs sync % (mean ± sd) | Δ range % | goodput | up MB/learner | down MB/learner |",
             "|---|---|---|---|---|---|---|"]
    for name, runs in results.items():
        ce = [r["heldout_ce"] for r in runs]
        mean, sd = spread(ce)
        if name == "sync":
            lines.append(f"| sync | {mean:.4f} ± {sd:.4f} | 0 | - | 1 | - | - |")
            continue
        d = deltas_pct(ce, sync[:len(ce)])
        dm, dsd = spread(d)
        n = runs[0]["stats"].get("islands", 1)
        gp = statistics.fmean(r["stats"]["goodput"] for r in runs)
        up = statistics.fmean(r["stats"]["bytes_up"] for r in runs) / 1e6 / n
        down = statistics.fmean(r["stats"]["bytes_down"] for r in runs) / 1e6 / n
        lines.append(f"| {name} | {mean:.4f} ± {sd:.4f} | {dm:+.2f} ± {dsd:.2f} | [{min(d):+.2f}, {max(d):+.2f}] "
                     f"| {gp:.3f} | {up:.2f} | {down:.2f} |")
    return lines
