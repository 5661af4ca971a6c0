import json, sys, glob, statistics as st, math
sys.path.insert(0, "benchmarks"); from lib_compare import _T975
for d in sys.argv[1:]:
    diffs = []; art = []
    for f in sorted(glob.glob(d + "/wan-seed*.json")):
        r = json.load(open(f))["results"]
        y, t = r["yeto"], r["torchft-best"]
        diffs.append(100 * (y["final"] / t["final"] - 1))
        if "artifact" in y: art.append(100 * (y["artifact"] / t["final"] - 1))
    for name, xs in (("learners' final CE", diffs), ("artifact", art)):
        m = st.mean(xs); h = _T975[len(xs) - 2] * st.stdev(xs) / math.sqrt(len(xs))
        print(f"{d}: yeto {name} vs torchft-best learners' final CE, paired: {m:+.2f}% [{m-h:+.2f}, {m+h:+.2f}] n={len(xs)}; per seed " + ", ".join(f"{x:+.2f}" for x in xs))
