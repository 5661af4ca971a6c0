"""Mean held-out CE by step of each Yeto variant in wan.py result folders (the screens): python an.py DIR..."""
import collections
import glob
import json
import re
import statistics as st
import sys

STEPS = (20, 40, 80, 120, 160, 200, 240)
runs = collections.defaultdict(list)
for folder in sys.argv[1:]:
    for f in sorted(glob.glob(folder + "/*.json")):
        m = re.search(r"seed(\d+)-(.+)-r(\d+)\.json", f)
        try:
            results = json.load(open(f))["results"]
        except (OSError, ValueError, KeyError):
            continue
        for arm, r in results.items():
            if arm != "ddp":
                runs[m.group(2) if arm.startswith("yeto") else arm].append((int(m.group(1)), r))
for name, v in sorted(runs.items()):
    curves = [{p[1]: p[2] for p in r["curve"]} for _, r in v]
    row = " ".join(f"{st.mean(c[s] for c in curves):.3f}" for s in STEPS)
    print(f"{name:14s} n={len(v)} seeds={sorted({s for s, _ in v})} CE@{STEPS}: {row} "
          f"art={st.mean(r.get('artifact', r['final']) for _, r in v):.4f} MB={st.mean(r['bytes'] for _, r in v) / 1e6:.2f} "
          f"step_s={st.mean(r['median_step_s'] for _, r in v):.4f}")
