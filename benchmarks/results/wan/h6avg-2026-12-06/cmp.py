"""Each variant against torchft-best, paired by seed (steps, time, CE by step, bytes): python cmp.py DIR..."""
import collections
import glob
import json
import math
import re
import statistics as st
import sys

T95 = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}
rows = collections.defaultdict(dict)
for f in sorted(f for folder in sys.argv[1:] for f in glob.glob(folder + "/*.json")):
    m = re.search(r"seed(\d+)-(.+)-r(\d+)\.json", f)
    results = json.load(open(f))["results"]
    target = float(re.search(r"target held-out loss ([\d.]+)", open(f[:-5] + ".txt").read()).group(1))
    for arm, r in results.items():
        if arm == "ddp":
            continue
        curve = r["curve"]
        hit = next((p for p in curve if p[2] <= target), None)
        rows[int(m.group(1))][m.group(2) if arm.startswith("yeto") else arm] = {
            "t": hit[0] if hit else math.nan, "tf": hit[0] - curve[0][0] if hit else math.nan,
            "step": hit[1] if hit else math.nan, "final": r.get("artifact", r["final"]), "mb": r["bytes"] / 1e6,
            "step_s": r["median_step_s"], "ce": {p[1]: p[2] for p in curve}}


def ci(xs):
    xs = [x for x in xs if not math.isnan(x)]
    if len(xs) < 2:
        return f"{xs}"
    m = st.mean(xs)
    h = st.stdev(xs) / math.sqrt(len(xs)) * T95.get(len(xs), 2.2)
    return f"{m:.3f} [{m - h:.3f}, {m + h:.3f}] n={len(xs)}"


names = sorted({k for r in rows.values() for k in r})
for name in names:
    v = [r[name] for r in rows.values() if name in r]
    print(f"{name:13s} steps {ci([x['step'] for x in v])}  final {ci([x['final'] for x in v])}  "
          f"MB {st.mean(x['mb'] for x in v):.2f}  step_s {st.mean(x['step_s'] for x in v):.4f}")
for a in names:
    if a == "torchft-best":
        continue
    ps = [(r[a], r["torchft-best"]) for r in rows.values() if a in r and "torchft-best" in r]
    print(f"{a}/torchft-best: time from launch {ci([x['t'] / y['t'] for x, y in ps])}; "
          f"from first eval {ci([x['tf'] / y['tf'] for x, y in ps])}; "
          f"CE {ci([100 * (x['final'] / y['final'] - 1) for x, y in ps])}%; bytes {ci([x['mb'] / y['mb'] for x, y in ps])}")
    for s in (40, 80, 120, 160, 200, 240):
        print(f"   CE@{s} vs tft: {ci([100 * (x['ce'][s] / y['ce'][s] - 1) for x, y in ps])}%")
