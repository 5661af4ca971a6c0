"""Yeto's final held-out CE against torchft-best's, paired by seed, over wan.py --json files (run from the repo root):
    python benchmarks/results/wan/quiet-dnsfix-2026-12-06/paired_ce.py DIR [DIR ...]"""
from __future__ import annotations

import glob
import json
import math
import statistics
import sys

sys.path.insert(0, "benchmarks")
from lib_compare import _T975


def report(folder: str) -> None:
    learners, artifact = [], []
    for path in sorted(glob.glob(folder + "/wan-seed*.json")):
        results = json.load(open(path))["results"]
        yeto, best = results["yeto"], results["torchft-best"]
        learners.append(100 * (yeto["final"] / best["final"] - 1))
        if "artifact" in yeto:
            artifact.append(100 * (yeto["artifact"] / best["final"] - 1))
    for name, xs in (("learners' final CE", learners), ("artifact", artifact)):
        mean = statistics.mean(xs)
        half = _T975[len(xs) - 2] * statistics.stdev(xs) / math.sqrt(len(xs))
        print(f"{folder}: yeto {name} vs torchft-best learners' final CE, paired: {mean:+.2f}% "
              f"[{mean - half:+.2f}, {mean + half:+.2f}] n={len(xs)}; per seed " + ", ".join(f"{x:+.2f}" for x in xs))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        report(arg)
