"""benchmarks/wan.py's numbers: per-arm curves, time to target, the table and which issue-7 targets were met."""
from __future__ import annotations

import math

from lib_wan_proc import Proc, curve, stall, time_to

STALL_S = 1.0
"""A step this much longer than usual after a peer dies is a stall (torchft waits ~5 s: its heartbeat timeout)."""


def mean_curve(procs: list[Proc]) -> list[tuple[float, int, float]]:
    """The learners' held-out losses averaged per evaluated step, at the time the last of them got there."""
    by_step: dict[int, list[tuple[float, float]]] = {}
    for p in procs:
        for t, step, loss in curve(p):
            by_step.setdefault(step, []).append((t, loss))
    return [(max(t for t, _ in v), s, sum(x for _, x in v) / len(v)) for s, v in sorted(by_step.items())
            if len(v) == len(procs)]


def arm(procs: list[Proc], nbytes: tuple[int, int]) -> dict:
    """One arm's curve, final held-out loss (mean over learners), wall time and bytes (up, down)."""
    done = [p.done() for p in procs]
    finals = [d["heldout"] for d in done if d and d.get("heldout") is not None]
    ends = [max((t for t, _ in p.lines), default=math.nan) for p in procs]
    out = {"curve": mean_curve(procs), "final": sum(finals) / len(finals) if finals else math.nan,
           "wall_s": max(ends), "bytes": sum(nbytes), "up": nbytes[0], "down": nbytes[1],
           "tokens": sum(d["tokens"] for d in done if d)}
    syncs = [d for p in procs for _, d in p.lines if d.get("event") == "sync"]      # Yeto learners' protocol costs
    if syncs:
        out["keyframes"] = {k: sum(d.get(k) or 0 for d in syncs)
                            for k in ("adopted", "keyframes_requested", "bytes_fetched", "bytes_sent")}
    return out


def stall_of(survivor: Proc, kill_at: float) -> dict:
    median, longest_before, longest = stall(survivor, kill_at)
    return {"median_step_s": median, "max_step_before_kill_s": longest_before, "max_step_after_kill_s": longest,
            "stall_s": longest - median}


def target_of(ddp: dict, frac: float, steps: int) -> float:
    want = frac * steps
    return min(ddp["curve"], key=lambda c: abs(c[1] - want))[2]


def table(results: dict, args) -> list[str]:
    ddp = results["ddp"]
    target = target_of(ddp, args.target_frac, args.steps)
    lines = [f"target held-out loss {target:.4f} (DDP at step ~{int(args.target_frac * args.steps)})",
             f"{'arm':8} {'to target s':>12} {'wall s':>8} {'final CE':>9} {'vs DDP':>8} "
             f"{'MB on links':>12} {'up/down MB':>12} {'stall s':>8}"]
    row = {}
    for name, r in results.items():
        tt = time_to(r["curve"], target)
        row[name] = tt
        st = r.get("stall", {}).get("stall_s")
        lines.append(f"{name:8} {tt if tt is not None else float('nan'):12.1f} {r['wall_s']:8.1f} {r['final']:9.4f} "
                     f"{100 * (r['final'] - ddp['final']) / ddp['final']:+7.2f}% {r['bytes'] / 1e6:12.2f} "
                     f"{r.get('up', 0) / 1e6:5.2f}/{r.get('down', 0) / 1e6:<6.2f} "
                     f"{st if st is not None else float('nan'):8.2f}")
    yeto, ft = results["yeto"], results.get("torchft")
    if yeto.get("artifact") is not None:
        lines.append(f"yeto artifact (the finalizer's model from the syncer's final state): held-out CE {yeto['artifact']:.4f} "
                     f"({100 * (yeto['artifact'] - ddp['final']) / ddp['final']:+.2f}% vs DDP)")
    ratio = row["yeto"] / row["ddp"] if row.get("yeto") and row.get("ddp") else math.nan
    final = yeto.get("artifact", yeto["final"])         # the artifact when the run was finalized: what a user gets
    quality = 100 * (final - ddp["final"]) / ddp["final"]
    lines.append(f"target quality ({'the artifact' if 'artifact' in yeto else 'final CE'} within 1% of DDP): "
                 f"{'MET' if quality <= 1.0 else 'NOT MET'} ({quality:+.2f}%)")
    st = yeto.get("stall", {})
    no_stall = st.get("stall_s", math.inf) < STALL_S
    lines.append(f"target no stall (survivor's longest step after the kill < median + {STALL_S:.0f} s): "
                 f"{'MET' if no_stall else 'NOT MET'} (longest after {st.get('max_step_after_kill_s', math.nan):.2f} s, "
                 f"before {st.get('max_step_before_kill_s', math.nan):.2f} s, median {st.get('median_step_s', math.nan):.3f} s)")
    if ft:
        met = row.get('yeto') and row.get('torchft') and row['yeto'] <= row['torchft']
        lines.append(f"target time <= torchft: {'MET' if met else 'NOT MET'}")
        lines.append(f"target bytes <= 0.15x torchft: {'MET' if yeto['bytes'] <= 0.15 * ft['bytes'] else 'NOT MET'} "
                     f"({yeto['bytes'] / max(1, ft['bytes']):.3f}x)")
    else:
        lines.append("targets against torchft: not measured (run with --torchft)")
    lines.append(f"yeto_time_to_target_over_ddp={ratio:.3f}")
    return lines
