"""benchmarks/wan.py's numbers: per-arm curves, time to target, the table and which of issues 7 and 14's targets were met."""
from __future__ import annotations

import math
import statistics

from lib_compare import ci95, fmt_ci
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
    seconds = [d["seconds"] for p in procs for _, d in p.steps()]
    if seconds:      # the learners' compute per step: what a busy machine slows, whatever the network does
        out["median_step_s"] = statistics.median(seconds)
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


FAULT_ROWS = ("yeto-fault", "yeto-replace", "yeto-freeze")
NEXT_GLOBAL_S = 5.0
"""Issue 14: after a kill, the next merged global version within this many seconds of the launcher's IslandExited."""


def _pct(value: float | None, base: float | None) -> float:
    return math.nan if value is None or not base else 100 * (value - base) / base


def _f(value, spec: str) -> str:
    return format(math.nan if value is None else value, spec)


def _met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def table(results: dict, args) -> list[str]:
    """The arms' rows, the global model's readings of the Yeto arms, and which of issues 7 and 14's targets were met."""
    ddp = results.get("ddp")
    target = target_of(ddp, args.target_frac, args.steps) if ddp else math.nan
    lines = [f"target held-out loss {target:.4f} (DDP at step ~{int(args.target_frac * args.steps)}"
             + (f", its curve from {ddp['from']} at {ddp['rate']})" if ddp and ddp.get("from") else ")") if ddp
             else "no ddp arm: no target, no time to target",
             f"{'arm':13} {'to target s':>12} {'step':>5} {'wall s':>8} {'final CE':>9} {'vs DDP':>8} "
             f"{'MB on links':>12} {'up/down MB':>12} {'stall s':>8} {'step s':>7}"]
    row = {}
    for name, r in results.items():
        st = r.get("stall", {}).get("stall_s")
        if "curve" not in r:                     # torchft-fault: the survivor's stall only
            lines.append(f"{name:13} {'':>12} {'':>5} {'':>8} {'':>9} {'':>8} {'':>12} {'':>12} {_f(st, '8.2f')}")
            continue
        tt = time_to(r["curve"], target) if ddp and not r.get("from") else None     # --ddp-from: another link's time
        step = next((s for _, s, loss in r["curve"] if loss <= target), None)     # the first evaluated step there
        row[name] = tt
        lines.append(f"{name:13} {_f(tt, '12.1f')} {step if step is not None else '-':>5} {r['wall_s']:8.1f} {r['final']:9.4f} "
                     f"{_pct(r['final'], ddp and ddp['final']):+7.2f}% {r['bytes'] / 1e6:12.2f} "
                     f"{r.get('up', 0) / 1e6:5.2f}/{r.get('down', 0) / 1e6:<6.2f} {_f(st, '8.2f')} "
                     f"{_f(r.get('median_step_s'), '7.3f')}")
    for name, r in results.items():
        if r.get("artifact") is not None:
            lines.append(f"{name} artifact (the finalizer's model from the syncer's final state): held-out CE "
                         f"{r['artifact']:.4f} ({_pct(r['artifact'], ddp and ddp['final']):+.2f}% vs DDP)")
        g = r.get("global")
        if g:
            lines.append(f"{name} global model: goodput by tokens {g['goodput_tokens']:.3f} (merged "
                         f"{g['tokens_merged']:.0f} of {g['tokens_trained']} trained), by time {g['goodput_time']:.3f} "
                         f"({g['useful_island_s']:.1f} useful of {g['paid_island_s']:.1f} paid island-seconds)")
    yeto = results.get("yeto")
    if yeto and yeto.get("artifact") is not None and ddp:
        quality = _pct(yeto["artifact"], ddp["final"])
        lines.append(f"target quality (the artifact within 1% of DDP): {_met(quality <= 1.0)} ({quality:+.2f}%)")
    for name in FAULT_ROWS:
        if name in results:
            lines += fault_lines(name, results[name], yeto, results.get("yeto-survivors"))
    fts = {n: r for n, r in results.items() if n.startswith("torchft") and "curve" in r}
    if fts and yeto:
        times = [row[n] for n in fts if row.get(n) is not None]
        best_t = min(times) if times else None
        best_b = min(r["bytes"] for r in fts.values())
        for name in (n for n in ("yeto", "yeto-ramp") if n in results):
            t_ratio = row[name] / best_t if row.get(name) is not None and best_t else math.nan
            lead = "" if name == "yeto" else f"{name}: "
            lines.append(f"{lead}target time <= 0.8x the best torchft arm's: {_met(t_ratio <= 0.8)} ({t_ratio:.3f}x; "
                         + ", ".join(f"{n} {_f(row.get(n), '.1f')} s" for n in fts) + ")")
            b_ratio = results[name]["bytes"] / max(1, best_b)
            lines.append(f"{lead}target bytes <= 0.5x the best torchft arm's: {_met(b_ratio <= 0.5)} ({b_ratio:.3f}x; "
                         + ", ".join(f"{n} {r['bytes'] / 1e6:.2f} MB" for n, r in fts.items()) + ")")
    else:
        lines.append("targets against torchft: not measured (run with --torchft)")
    ratio = row["yeto"] / row["ddp"] if row.get("yeto") and row.get("ddp") else math.nan
    lines.append(f"yeto_time_to_target_over_ddp={ratio:.3f}")
    return lines


def fault_lines(name: str, fault: dict, yeto: dict | None, survivors: dict | None = None) -> list[str]:
    """A fault arm's readings on the global model and its targets (next global, no stall, artifact vs fault-free and
    vs the survivors-only run)."""
    lines, kill = [], fault.get("global", {}).get("kill")
    frozen = bool(kill) and kill.get("fault") == "freeze"
    what = "the freeze" if frozen else "the kill"
    if frozen:
        lines.append(f"{name} after the freeze: next merged global {_f(kill['kill_to_next_global_s'], '.2f')} s after "
                     f"the freeze (the syncer's silence bound {_f(kill.get('silence_bound_s'), '.2f')} s at the frozen "
                     f"learner's step time {_f(kill.get('frozen_step_s'), '.3f')} s; nobody reported the island before the "
                     f"run's end); {kill['rounds_merged_while_down']} rounds merged without the island")
    elif kill:
        rejoin = kill.get("down_until_rejoin_s")
        lines.append(f"{name} after the kill: next merged global {_f(kill['kill_to_next_global_s'], '.2f')} s after "
                     f"the kill, {_f(kill['exited_to_next_global_s'], '.2f')} s after IslandExited (published "
                     f"{kill['launcher_exited_after_kill_s']:.2f} s after the kill); "
                     f"{kill['rounds_merged_while_down']} rounds merged without the island"
                     + (f"; the replacement in a merged round {rejoin:.2f} s after the kill" if rejoin is not None else ""))
    st = fault.get("stall", {})
    lines.append(f"target no stall ({name}: survivor's longest step after {what} < median + {STALL_S:.0f} s): "
                 f"{_met(st.get('stall_s', math.inf) < STALL_S)} (longest after "
                 f"{st.get('max_step_after_kill_s', math.nan):.2f} s, before "
                 f"{st.get('max_step_before_kill_s', math.nan):.2f} s, median {st.get('median_step_s', math.nan):.3f} s)")
    if kill and not frozen:
        wait = kill["exited_to_next_global_s"]
        lines.append(f"target next global <= {NEXT_GLOBAL_S:.0f} s after IslandExited ({name}): "
                     f"{_met(wait is not None and wait <= NEXT_GLOBAL_S)} ({_f(wait, '.2f')} s)")
    if yeto and fault.get("artifact") is not None and yeto.get("artifact") is not None:
        delta = _pct(fault["artifact"], yeto["artifact"])
        lines.append(f"target fault artifact within 1% of the fault-free one ({name}): {_met(delta <= 1.0)} ({delta:+.2f}%)")
    if survivors and fault.get("artifact") is not None and survivors.get("artifact") is not None:
        delta = _pct(fault["artifact"], survivors["artifact"])
        lines.append(f"target fault artifact no worse than the survivors-only run's ({name}): {_met(delta <= 0.0)} "
                     f"({delta:+.2f}%)")
    return lines


def beats(deltas: list[float]) -> str:
    """The fault rows' bar against the survivors-only run: its artifact no worse, i.e. the paired deltas' 95% interval
    reaches 0 or below (one seed: the delta itself); '-' without a delta."""
    if not deltas:
        return "-"
    ci = ci95(deltas)
    return _met((ci[1] if ci else deltas[0]) <= 0.0)


def seeds_table(runs: list[tuple[dict, object]]) -> list[str]:
    """Several runs' --json (one per seed; `args` parsed from each run's argv): per arm the time and step at which its
    learners reached DDP's target (the time from process start, and from the first evaluation: without start-up),
    held-out CE (learners; the artifact for Yeto arms) against DDP paired by seed, MB on the links;
    then each Yeto arm's ratios to torchft-best per seed (time, bytes) with 95% t intervals, and how
    many seeds met issue 14's targets (time <= 0.8x, bytes <= 0.5x). A run without a ddp arm has no target: left out."""
    per: dict[str, dict[str, dict[int, float | None]]] = {}
    seeds = []
    for run, args in runs:
        res = run["results"]
        if "ddp" not in res:
            continue
        seed, target = args.seed, target_of(res["ddp"], args.target_frac, args.steps)
        seeds.append(seed)
        for name, r in res.items():
            if "curve" not in r:
                continue
            if r.get("from"):          # --ddp-from: its curve is the target; its time ran on another link
                name = f"ddp (from {r['rate']})"
            got = per.setdefault(name, {k: {} for k in ("time", "train", "step", "ce", "artifact", "mb")})
            got["time"][seed] = time_to(r["curve"], target)
            got["train"][seed] = None if got["time"][seed] is None else got["time"][seed] - r["curve"][0][0]
            got["step"][seed] = next((st for _, st, loss in r["curve"] if loss <= target), None)
            got["ce"][seed] = _pct(r["final"], res["ddp"]["final"])
            got["artifact"][seed] = _pct(r["artifact"], res["ddp"]["final"]) if r.get("artifact") is not None else None
            got["mb"][seed] = r["bytes"] / 1e6
    if not seeds:
        return ["no run with a ddp arm: no target"]
    lines = [f"seeds {','.join(map(str, sorted(seeds)))}: per arm, mean [95% t interval] over the seeds",
             "| arm | seeds | to target s | from the first evaluation s | step at target | learners' CE vs DDP % "
             "| artifact CE vs DDP % | MB on links |",
             "|---|---|---|---|---|---|---|---|"]
    for name, got in per.items():
        def vals(k: str, got=got) -> list[float]:
            return [v for v in got[k].values() if v is not None]
        reached = f"{len(vals('time'))}/{len(got['time'])} reached"
        lines.append(f"| {name} | {','.join(map(str, sorted(got['time'])))} | {fmt_ci(vals('time'), '.1f')} ({reached}) "
                     f"| {fmt_ci(vals('train'), '.1f')} | {fmt_ci(vals('step'), '.0f')} | {fmt_ci(vals('ce'), '+.2f')} "
                     f"| {fmt_ci(vals('artifact'), '+.2f')} "
                     f"| {fmt_ci(vals('mb'), '.2f')} |")
    best = per.get("torchft-best")
    for name in (n for n in ("yeto", "yeto-sparse", "yeto-ramp") if n in per and best):
        mine = per[name]
        both = sorted(s for s in mine["time"] if s in best["time"])
        t = [mine["time"][s] / best["time"][s] for s in both if mine["time"][s] is not None and best["time"][s]]
        b = [mine["mb"][s] / best["mb"][s] for s in both if best["mb"][s]]
        tr = [mine["train"][s] / best["train"][s] for s in both if mine["train"][s] is not None and best["train"][s]]
        lines.append(f"{name} / torchft-best, paired by seed: time to target {fmt_ci(t, '.3f')} "
                     f"(<= 0.8 at {sum(x <= 0.8 for x in t)}/{len(t)} seeds; per seed "
                     f"{', '.join(f'{x:.3f}' for x in t)}), bytes {fmt_ci(b, '.3f')} "
                     f"(<= 0.5 at {sum(x <= 0.5 for x in b)}/{len(b)}); "
                     f"from the first evaluation (start-up left out) {fmt_ci(tr, '.3f')}")
    return lines


def faults_table(runs: list[tuple[dict, object]]) -> list[str]:
    """Several runs' --json with fault arms (one per seed and island count): per fault arm and island count, over the
    seeds, mean [95% t interval] of the artifact against the same seed's fault-free `yeto` artifact and against its
    survivors-only `yeto-survivors` one (%; the bar: no worse than the survivors, within the interval), the next
    merged global after IslandExited and after the fault (s; a freeze: the syncer's silence bound beside it), rounds
    merged without the island, the replacement's first merged round after the kill (s), goodput by tokens and by time;
    and how many seeds met issue 14's targets (artifact within 1%, next global <= 5 s after IslandExited). The
    survivors-only arm's own row: its artifact against the fault-free one. Runs without a `yeto` arm are left out."""
    per: dict[tuple[str, int], dict[str, dict[int, float | None]]] = {}
    keys = ("artifact", "survivors", "exited", "kill", "bound", "rounds", "rejoin", "good_tokens", "good_time")
    for run, args in runs:
        res = run["results"]
        base = res.get("yeto", {}).get("artifact")
        alone = res.get("yeto-survivors", {}).get("artifact")
        if base is not None and alone is not None:
            got = per.setdefault(("yeto-survivors", args.learners), {k: {} for k in keys})
            got["artifact"][args.seed] = _pct(alone, base)
        for name, r in res.items():
            kill = r.get("global", {}).get("kill") if isinstance(r, dict) else None
            if not kill or base is None or r.get("artifact") is None:
                continue
            got = per.setdefault((name, args.learners), {k: {} for k in keys})
            g = r["global"]
            got["artifact"][args.seed] = _pct(r["artifact"], base)
            got["survivors"][args.seed] = None if alone is None else _pct(r["artifact"], alone)
            got["exited"][args.seed] = kill["exited_to_next_global_s"]
            got["kill"][args.seed] = kill["kill_to_next_global_s"]
            got["bound"][args.seed] = kill.get("silence_bound_s")
            got["rounds"][args.seed] = kill["rounds_merged_while_down"]
            got["rejoin"][args.seed] = kill.get("down_until_rejoin_s")
            got["good_tokens"][args.seed] = g.get("goodput_tokens")
            got["good_time"][args.seed] = g.get("goodput_time")
    if not per:
        return ["no run with a fault arm and a fault-free yeto arm"]
    lines = ["fault arms: per arm and island count, mean [95% t interval] over the seeds",
             "| arm | islands | seeds | artifact vs fault-free % | within 1% | artifact vs survivors-only % "
             "| no worse than survivors | next global after IslandExited s | <= 5 s | after the fault s "
             "| silence bound s | rounds without the island | replacement merged after the kill s "
             "| goodput by tokens | goodput by time |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, islands), got in sorted(per.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        def vals(k: str, got=got) -> list[float]:
            return [v for v in got[k].values() if v is not None]
        n = len(got["artifact"])
        exited = (f"{fmt_ci(vals('exited'), '.2f')} (max {max(vals('exited')):.2f}) "
                  f"| {sum(v <= NEXT_GLOBAL_S for v in vals('exited'))}/{n}" if vals("exited") else "- | -")
        lines.append(f"| {name} | {islands} | {','.join(map(str, sorted(got['artifact'])))} "
                     f"| {fmt_ci(vals('artifact'), '+.2f')} | {sum(v <= 1.0 for v in vals('artifact'))}/{n} "
                     f"| {fmt_ci(vals('survivors'), '+.2f')} | {beats(vals('survivors'))} "
                     f"| {exited} | {fmt_ci(vals('kill'), '.2f')} | {fmt_ci(vals('bound'), '.2f')} "
                     f"| {fmt_ci(vals('rounds'), '.1f')} | {fmt_ci(vals('rejoin'), '.1f')} "
                     f"| {fmt_ci(vals('good_tokens'), '.3f')} | {fmt_ci(vals('good_time'), '.3f')} |")
    return lines


def tune_table(runs: list[tuple[dict, object]]) -> list[str]:
    """Several runs' --json at different --lr (issue 39: tune every arm on tuning seeds): per arm, the final held-out CE
    (the artifact for Yeto arms, else the learners' mean) at each inner lr, mean over the seeds run at it, and the best
    lr, marked `edge` when it is the smallest or largest tried (widen the grid). Empty when no arm saw two lrs."""
    per: dict[str, dict[float, list[float]]] = {}
    for run, args in runs:
        for name, r in run["results"].items():
            ce = r.get("artifact", r.get("final")) if isinstance(r, dict) else None
            if ce is not None and math.isfinite(ce):
                per.setdefault(name, {}).setdefault(args.lr.get(name, args.lr[""]), []).append(ce)
    per = {name: got for name, got in per.items() if len(got) > 1}
    if not per:
        return []
    lrs = sorted({lr for got in per.values() for lr in got})
    lines = ["inner lr grid: final held-out CE (artifact for Yeto arms), mean over the seeds at each lr (n)",
             "| arm | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | best |", "|---|" + "---|" * (len(lrs) + 1)]
    for name, got in per.items():
        means = {lr: statistics.fmean(v) for lr, v in got.items()}
        best = min(means, key=means.__getitem__)
        edge = " (edge)" if best in (min(got), max(got)) else ""
        lines.append(f"| {name} | " + " | ".join(f"{means[lr]:.4f} ({len(got[lr])})" if lr in got else "-" for lr in lrs)
                     + f" | {best:g}{edge} |")
    return lines
