import json
import sys

for path in sys.argv[1:]:
    d = json.load(open(path))
    arms = list(d["arms"])
    tot = {a: [r["critical"]["total"] for r in d["results"] if r["arm"] == a] for a in arms}
    print(path.split('/')[-1], {a: d["arms"][a]["commit"][:7] for a in arms})
    for a in arms:
        print(f"  {a}: " + ", ".join(f"{t:.1f}" for t in tot[a]) + f" (median {d['medians'][a]['total']:.2f})")
    for a in arms[1:]:
        print(f"  {a}/base per rep: " + ", ".join(f"{x/y:.2f}" for x, y in zip(tot[a], tot[arms[0]])) +
              f"; medians {d['medians'][a]['total']/d['medians'][arms[0]]['total']:.2f}")
