"""h-2026-12-06: Yeto's H (--sync-every) 8 and 12 against 24 on wan.py's 20 Mbit/s task, tuning seeds 10 and 11.

    python benchmarks/results/wan/h-2026-12-06/analyze.py [FOLDER]     # FOLDER: this one by default

Per run: the step at which the learners' mean held-out CE first reaches the target (DDP's CE at step 140 of the same
run's ddp arm; the tuning's fixed target beside it as a check), learners' final and artifact CE, MB on the links, time to
target from launch and from the first evaluation, the steady-state quorum gap. Then per H: artifact CE against H 24's
(Welch 95% per seed, and over both seeds the mean of the two seeds' relative differences with Welch-Satterthwaite df,
as ../steady2-2026-12-05/analyze.py does), bytes against H 24's and against torchft-best's (its tuned runs: seeds 10
and 11 in ../steady-2026-12-05/*-r3-torchft-*, seeds 0-4 in ../steady2-2026-12-05/report/), and torchft-best's own step
at the fixed target on seeds 10 and 11.
"""
import glob
import json
import math
import pathlib
import re
import statistics as st
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))    # benchmarks/
import lib_compare

HERE = pathlib.Path(__file__).parent
TARGET = {10: 3.6893, 11: 3.6818}          # DDP's step-140 CE on the tuning seeds (../steady-2026-12-05/README.md)
TFT = {s: HERE.parent / f"steady-2026-12-05/wan-seed{s}-yeto-default-r3-torchft-lr6e-3.json" for s in (10, 11)}
TFT_REPORT = sorted((HERE.parent / "steady2-2026-12-05/report").glob("*.json"))


def t975(df: float) -> float:
    """t_0.975 at a real (Welch-Satterthwaite) df: lib_compare's table, linear between the two whole dfs around it."""
    lo = max(1, math.floor(df))
    return lib_compare.t975(lo) + (df - lo) * (lib_compare.t975(lo + 1) - lib_compare.t975(lo))


def first(curve, target, i):
    return next((c[i] for c in curve if c[2] <= target), None)


def crossing(curve, target):
    """The step where the learners' mean CE crosses the target, linear between the two evaluations around it (finer
    than the 20-step evaluation grid; an estimate, not a measured step)."""
    for (_, s0, l0), (_, s1, l1) in zip(curve, curve[1:]):
        if l0 > target >= l1:
            return s0 + (s1 - s0) * (l0 - target) / (l0 - l1)
    return None


def welch(a, b):
    ma, mb = st.mean(a), st.mean(b)
    va, vb = st.variance(a) / len(a), st.variance(b) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return ma - mb, t975(df) * math.sqrt(va + vb), df, va + vb, va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)


def ci(xs, fmt):
    if len(xs) < 2:
        return "-" if not xs else format(xs[0], fmt)
    m, h = st.mean(xs), t975(len(xs) - 1) * st.stdev(xs) / math.sqrt(len(xs))
    return f"{m:{fmt}} [{m - h:{fmt}}, {m + h:{fmt}}]"


folder = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
tft_mb = {s: json.load(open(p))["results"]["torchft-best"]["bytes"] / 1e6 for s, p in TFT.items()}
tft_step = {s: first(json.load(open(p))["results"]["torchft-best"]["curve"], TARGET[s], 1) for s, p in TFT.items()}
tft_rep = [json.load(open(p))["results"]["torchft-best"]["bytes"] / 1e6 for p in TFT_REPORT]
tft_all = list(tft_mb.values()) + tft_rep
print(f"torchft-best MB on links (H 24, bf16): seeds 10, 11 {tft_mb[10]:.2f}, {tft_mb[11]:.2f}; seeds 0-4 "
      f"{', '.join(f'{x:.2f}' for x in tft_rep)}; mean of all {st.mean(tft_all):.2f}; "
      f"its step at the fixed target on seeds 10, 11: {tft_step[10]}, {tft_step[11]}")
print()
print("| seed | H | run | target (in-run DDP) | step at target | (fixed target) | learners' final CE | artifact CE | "
      "interpolated step | MB on links | MB / torchft-best | to target s | from first eval s | yeto median step s | "
      "steady gap median | rounds merged | goodput tokens | load first-last |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
runs = {}
for f in sorted(glob.glob(f"{folder}/wan-seed*-h*-r*.json"), key=lambda p: [int(x) for x in re.findall(r"\d+", p)]):
    m = re.search(r"seed(\d+)-ddp-yeto-h(\d+)-r(\d+)", f)
    seed, h, rep = int(m[1]), int(m[2]), int(m[3])
    res = json.load(open(f))["results"]
    y, ddp = res["yeto"], res["ddp"]
    target = min(ddp["curve"], key=lambda c: abs(c[1] - 140))[2]
    step, tt = first(y["curve"], target, 1), first(y["curve"], target, 0)
    txt = open(f.replace(".json", ".txt")).read().splitlines()
    la = [(re.search(r"load: ([\d.]+)", x) or [None, "?"])[1] for x in (txt[0], txt[-1])]
    r = y["global"]["rounds"]
    sm = r.get("quorum_ms_steady_median")
    steady = "-" if sm is None else f"{sm:.0f} ms = {sm / 1000 / y['median_step_s']:.1f} steps"
    row = dict(step=step, fixed=first(y["curve"], TARGET[seed], 1), artifact=y["artifact"], final=y["final"],
               mb=y["bytes"] / 1e6, tt=tt, tr=None if tt is None else tt - y["curve"][0][0], rep=rep, target=target,
               xstep=crossing(y["curve"], target), curve={c[1]: c[2] for c in y["curve"]})
    runs.setdefault((seed, h), []).append(row)
    xs = row["xstep"] if row["xstep"] is None else round(row["xstep"])
    print(f"| {seed} | {h} | r{rep} | {target:.4f} | {step} | {row['fixed']} | {y['final']:.4f} | {y['artifact']:.4f} | "
          f"{xs} | {row['mb']:.2f} | {row['mb'] / tft_mb[seed]:.3f} | {tt if tt is None else round(tt, 1)} | "
          f"{row['tr'] if tt is None else round(row['tr'], 1)} | {y['median_step_s']:.3f} | {steady} | {r['merged']} | "
          f"{y['global']['goodput_tokens']:.3f} | {la[0]}-{la[1]} |")

print()
for key in sorted(runs):
    rs = runs[key]
    steps = [x["step"] for x in rs]
    print(f"seed {key[0]} H {key[1]}: n {len(rs)}, steps at target {steps} (median "
          f"{st.median([s if s is not None else 999 for s in steps])}), artifact mean {st.mean(x['artifact'] for x in rs):.4f}, "
          f"interpolated {[x['xstep'] and round(x['xstep']) for x in rs]} (mean "
          f"{st.mean([x['xstep'] for x in rs if x['xstep']]):.0f}), MB {ci([x['mb'] for x in rs], '.2f')}, "
          f"to target s {[x['tt'] and round(x['tt'], 1) for x in rs]}, "
          f"from first eval s {[x['tr'] and round(x['tr'], 1) for x in rs]}")
print()
for h in sorted({h for _, h in runs} - {24}):
    parts = []
    for seed in (10, 11):
        a = [x["artifact"] for x in runs.get((seed, h), [])]
        b = [x["artifact"] for x in runs.get((seed, 24), [])]
        if len(a) < 2 or len(b) < 2:
            continue
        d, w, df, v, v4 = welch(a, b)
        base = st.mean(b)
        parts.append((d / base, v / base ** 2, v4 / base ** 4))
        print(f"H {h} seed {seed}: artifact n {len(a)} vs {len(b)}, {100 * d / base:+.2f}% [{100 * (d - w) / base:+.2f}, "
              f"{100 * (d + w) / base:+.2f}] (means {st.mean(a):.4f} vs {base:.4f}, sd {st.stdev(a):.4f} / {st.stdev(b):.4f})")
    if len(parts) == 2:
        d = sum(p[0] for p in parts) / 2
        v = sum(p[1] for p in parts) / 4
        df = v ** 2 / sum(p[2] / 16 for p in parts)
        w = t975(df) * math.sqrt(v)
        print(f"H {h} both seeds: artifact {100 * d:+.2f}% [{100 * (d - w):+.2f}, {100 * (d + w):+.2f}] (df {df:.1f})")
    for seed in (10, 11):
        a = [x["mb"] for x in runs.get((seed, h), [])]
        b = [x["mb"] for x in runs.get((seed, 24), [])]
        if a and b:
            print(f"H {h} seed {seed}: MB {st.mean(a):.2f} = {st.mean(a) / st.mean(b):.2f}x H 24's ({st.mean(b):.2f}), "
                  f"{st.mean(a) / tft_mb[seed]:.3f}x torchft-best's on the seed ({tft_mb[seed]:.2f}), "
                  f"{st.mean(a) / st.mean(tft_all):.3f}x its mean over seeds 0-4, 10, 11")

print()
print("learners' mean held-out CE at each evaluation, mean over runs, minus H 24's on the seed (negative: ahead)")
for seed in (10, 11):
    base = runs.get((seed, 24), [])
    for h in sorted({h for s_, h in runs if s_ == seed}):
        rs = runs[(seed, h)]
        cells = []
        for step in range(20, 241, 20):
            m = st.mean(x["curve"][step] for x in rs)
            cells.append(f"{step}: {m:.3f}" if h == 24 or not base else
                         f"{step}: {m - st.mean(x['curve'][step] for x in base):+.3f}")
        print(f"seed {seed} H {h} (n {len(rs)}): " + ", ".join(cells))
