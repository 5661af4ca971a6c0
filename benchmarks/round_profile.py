"""Where a syncer round's critical path goes: exclusive wall time per step, named by where it is called from.

The same round as benchmarks/round.py (one fragment, M learners, q4 up and down, the snapshot written by a thread
beside the round), with the steps of the path wrapped in timers (services/syncer/profiling.py): admission,
reassembly, SHA-256, the decode, the Gram-row fold, the merge, the broadcast (subtraction, encode, the shadow's
decode and add), the snapshot's copies and the broadcast's chunking. Each timer counts its own time less the timers
inside it, under the path of the timers around it (`receive/take/reassembly/sha256`: hashing at intake), so the rows
add up to the round's critical path (intake of the first chunk to the last chunk out). Best of `--reps` rounds by
that sum; the memcpy of the round's (M + 4) rows is timed in the same run, beside every round (since 2026-12-05), as
round.py does. Several `--threads` counts (e.g. 1,2) are profiled on the same rows in one process, their rounds
alternating, and a last table puts each step's time side by side with its ratio (the first count over the last):
which steps scale with the kernel threads and which do not.

    .venv/bin/python benchmarks/round_profile.py [--values 16M] [--learners 4] [--reps 3] [--threads 1[,2]]
        [--gram kept|at-merge|incremental]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import tempfile
from pathlib import Path

import numpy as np
import round as rnd

from yeto.schemas import codecs
from yeto.schemas.codecs.base import spread_on
from yeto.services.syncer.api import backend, gram_at_merge, keep_encoded, perform, profiling


def one_round(core, deltas: list[bytes], sink: rnd.Sink) -> dict[str, float]:
    """One round through the timers: every push's chunks received, the outputs performed; seconds by path."""
    n, version = core.fragments[0].numel, core.fragments[0].version
    pushes = [rnd.split_chunks(rnd.header(f"l{m}", "push", "q4", n, d, step=version + 1, base=version), d)
              for m, d in enumerate(deltas)]
    profiling.TOTALS.clear()
    out = [o for chunks in pushes for h, c in chunks for o in core.receive(h, c, next(rnd.CLOCK))]
    sink.in_path = False
    profiling.timed("perform", perform)(out, sink)
    sink.writer.join()                      # beside the path: waited for after it, untimed
    sink.writer = None
    return dict(profiling.TOTALS)


def report(totals: dict[str, float], memcpy: float, n: int, m: int, threads: int) -> None:
    print(f"backend={backend.NAME} values={n} learners={m} threads={threads}; exclusive ms per step of one round "
          f"(path: the timed calls around it); x: over one memcpy of the (M + 4) rows, {memcpy * 1e3:.1f} ms")
    total = sum(totals.values())
    for path, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{seconds * 1e3:9.1f} ms {seconds / memcpy:6.2f}x {100 * seconds / total:5.1f}%  {path}")
    print(f"{total * 1e3:9.1f} ms {total / memcpy:6.2f}x 100.0%  (sum: the round's critical path)")
    print(f"round_profile_sum_over_memcpy={total / memcpy:.3f}")


def side_by_side(bests: dict[int, dict[str, float]]) -> None:
    """Each step's ms per thread count, and the first count's over the last's (how far it scaled)."""
    counts = list(bests)
    first, last = counts[0], counts[-1]
    paths = sorted({p for b in bests.values() for p in b}, key=lambda p: -bests[first].get(p, 0.0))
    print("ms per step by kernel threads; scaled: " + f"{first} thread(s) over {last}")
    print(" ".join(f"{t:>9}" for t in counts) + f" {'scaled':>7}  path")
    for path in paths:
        ms = [bests[t].get(path, 0.0) * 1e3 for t in counts]
        if max(ms) < 0.5:
            continue
        ratio = ms[0] / ms[-1] if ms[-1] > 0 else float("inf")
        print(" ".join(f"{v:9.1f}" for v in ms) + f" {ratio:7.2f}  {path}")
    totals = [sum(bests[t].values()) * 1e3 for t in counts]
    print(" ".join(f"{v:9.1f}" for v in totals) + f" {totals[0] / totals[-1]:7.2f}  (sum)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="16M", help="values per fragment (K, M and G suffixes)")
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="1", help="kernel threads, comma-separated (profiled alternately in one run)")
    ap.add_argument("--kernels", default="compiled", choices=("reference", "separate", "compiled"))
    ap.add_argument("--gram", default="kept", choices=("kept", "at-merge", "incremental"),
                    help="a push's Gram row: its q4 bytes kept and decoded in the merge's passes, in the merge's one pass "
                         "over the f32 rows, or folded as it is decoded")
    ap.add_argument("--spread", default="on", choices=("on", "off"),
                    help="the broadcast's chunks, a kept push's copy and Θ's norm on the kernel threads, or on one")
    args = ap.parse_args()
    spread_on(args.spread == "on")
    gram_at_merge(args.gram in ("kept", "at-merge"))
    keep_encoded(args.gram == "kept")
    n, m = rnd.parse_sizes(args.values)[0], args.learners
    counts = [int(t) for t in args.threads.split(",")]
    backend.set_threads(max(counts))
    backend.use_kernels(args.kernels)
    rng = np.random.default_rng(0)
    core = rnd.new_core(n, m, rng)
    deltas = [codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3) for _ in range(m)]
    memcpy = rnd.memcpy_seconds(n, m + 4, 1)
    profiling.instrument()
    with tempfile.TemporaryDirectory(prefix="yeto-round-profile-") as tmp:
        sink = rnd.Sink(Path(tmp))
        one_round(core, deltas, sink)                     # warm: pages faulted in, kernels loaded, pools made at most
        rounds: dict[int, list[dict[str, float]]] = {t: [] for t in counts}
        for _ in range(args.reps):                        # a memcpy beside each round: a load that moves weighs on both
            memcpy = min(memcpy, rnd.memcpy_seconds(n, m + 4, 1))
            for t in counts:                              # thread counts alternating, round by round
                backend.set_threads(t)
                rounds[t].append(one_round(core, deltas, sink))
        bests = {t: min(r, key=lambda totals: sum(totals.values())) for t, r in rounds.items()}
    for t in counts:
        report(bests[t], memcpy, n, m, t)
    if len(counts) > 1:
        side_by_side(bests)


if __name__ == "__main__":
    main()
