"""steady2: per-run rows and Welch intervals of each variant against the default, per seed and over both seeds.

    python benchmarks/results/wan/steady2-2026-12-05/analyze.py [FOLDER]     # FOLDER: this one by default
"""
import glob
import json
import math
import re
import statistics as st
import sys


def t975(df: float) -> float:
    """The 97.5% quantile of Student's t with (real) df: bisection on the cdf, integrated by Simpson's rule."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def pdf(x):
        return c * (1 + x * x / df) ** (-(df + 1) / 2)

    def cdf0(x, n=2000):                       # P(0 < T < x)
        h = x / n
        return h / 3 * sum((1 if i in (0, n) else 4 if i % 2 else 2) * pdf(i * h) for i in range(n + 1))
    lo, hi = 0.0, 50.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf0(mid) < 0.475 else (lo, mid)
    return (lo + hi) / 2


class stats:
    class t:
        @staticmethod
        def ppf(q, df):
            return t975(df)

TARGET = {10: 3.6893, 11: 3.6818}          # DDP's step-140 CE on the tuning seeds (../steady-2026-12-05/README.md)
folder = sys.argv[1] if len(sys.argv) > 1 else str(__import__("pathlib").Path(__file__).parent)
runs, steadies, steps = {}, {}, {}
for f in sorted(glob.glob(f"{folder}/*.json")):
    m = re.search(r"seed(\d+)-yeto-([a-z0-9.\-]+?)(?:-r(\d+))?(?:-torchft)?-lr", f)
    seed, var, rep = int(m[1]), m[2], int(m[3] or 1)
    y = json.load(open(f))["results"]["yeto"]
    r = y["global"]["rounds"]
    step = next((s for _, s, loss in y["curve"] if loss <= TARGET[seed]), None)
    txt = open(f.replace(".json", ".txt")).read().splitlines()
    found = [re.search(r"load average: ([\d.]+)|load(?: at footer)?: ([\d.]+)", x) for x in (txt[0], txt[-1])]
    la = [(g[1] or g[2]) if g else "?" for g in found]
    runs.setdefault((seed, var), []).append(y["artifact"])
    sm = r.get("quorum_ms_steady_median")
    steady = "-" if sm is None else f"{sm:.0f} ms = {sm/1000/y['median_step_s']:.1f} steps"
    steadies.setdefault((seed, var), []).append(None if sm is None else sm / 1000 / y["median_step_s"])
    steps.setdefault((seed, var), []).append(step)
    print(f"| {seed} | {var} r{rep} | {step} | {y['final']:.4f} | {y['artifact']:.4f} | {y['bytes']/1e6:.2f} | "
          f"{r['quorum_ms_mean']:.0f} | {steady} | "
          f"{r['momentum_restarts']} of {r['merged']} | {r['momentum_cos_mean']:+.2f} | {la[0]}-{la[1]} |")

def welch(a, b):
    ma, mb = st.mean(a), st.mean(b)
    va, vb = st.variance(a) / len(a), st.variance(b) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    h = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    return ma - mb, h, df

print()
for key in sorted(runs):
    q = [x for x in steadies[key] if x is not None]
    print(key, "n", len(runs[key]), f"mean artifact {st.mean(runs[key]):.4f}", "steps at target", steps[key],
          "steady gap median (steps) per run", [round(x, 1) for x in q])
print()
for var in sorted({v for _, v in runs} - {"default"}):
    parts = []
    for seed in (10, 11):
        a, b = runs.get((seed, var), []), runs.get((seed, "default"), [])
        if len(a) < 2 or len(b) < 2:
            continue
        d, h, df = welch(a, b)
        base = st.mean(b)
        parts.append((d, st.variance(a) / len(a) + st.variance(b) / len(b),
                      (st.variance(a) / len(a)) ** 2 / (len(a) - 1) + (st.variance(b) / len(b)) ** 2 / (len(b) - 1), base))
        print(f"{var} seed {seed}: n {len(a)} vs {len(b)}, {100*d/base:+.2f}% [{100*(d-h)/base:+.2f}, {100*(d+h)/base:+.2f}] "
              f"(means {st.mean(a):.4f} vs {base:.4f}, sd {st.stdev(a):.4f} / {st.stdev(b):.4f})")
    if len(parts) == 2:             # the mean of the two seeds' differences, Welch-Satterthwaite df
        d = sum(p[0] / p[3] for p in parts) / 2
        v = sum(p[1] / p[3] ** 2 for p in parts) / 4
        df = v ** 2 / sum((p[2] / p[3] ** 4) / 16 for p in parts)
        h = stats.t.ppf(0.975, df) * math.sqrt(v)
        print(f"{var} both seeds: {100*d:+.2f}% [{100*(d-h):+.2f}, {100*(d+h):+.2f}] (df {df:.1f})")
