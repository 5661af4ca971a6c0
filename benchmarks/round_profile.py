"""Where a syncer round's critical path goes: exclusive wall time per step, named by where it is called from.

The same round as benchmarks/round.py (one fragment, M learners, q4 up and down, the snapshot written by a thread
beside the round), with the steps of the path wrapped in timers (services/syncer/profiling.py): admission,
reassembly, SHA-256, the decode, the Gram-row fold, the merge, the broadcast (subtraction, encode, the shadow's
decode and add), the snapshot's copies and the broadcast's chunking. Each timer counts its own time less the timers
inside it, under the path of the timers around it (`receive/take/reassembly/sha256`: hashing at intake), so the rows
add up to the round's critical path (intake of the first chunk to the last chunk out). Best of `--reps` rounds by
that sum; the memcpy of the round's (M + 4) rows is timed in the same run, beside every round (since 2026-12-05), as
round.py does.

    .venv/bin/python benchmarks/round_profile.py [--values 16M] [--learners 4] [--reps 3] [--threads 1]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="16M", help="values per fragment (K, M and G suffixes)")
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="kernel threads")
    ap.add_argument("--kernels", default="compiled", choices=("reference", "separate", "compiled"))
    ap.add_argument("--gram", default="kept", choices=("kept", "at-merge", "incremental"),
                    help="a push's Gram row: its q4 bytes kept and decoded in the merge's passes, in the merge's one pass "
                         "over the f32 rows, or folded as it is decoded")
    args = ap.parse_args()
    gram_at_merge(args.gram in ("kept", "at-merge"))
    keep_encoded(args.gram == "kept")
    n, m = rnd.parse_sizes(args.values)[0], args.learners
    backend.set_threads(args.threads)
    backend.use_kernels(args.kernels)
    rng = np.random.default_rng(0)
    core = rnd.new_core(n, m, rng)
    deltas = [codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3) for _ in range(m)]
    memcpy = rnd.memcpy_seconds(n, m + 4, 1)
    profiling.instrument()
    with tempfile.TemporaryDirectory(prefix="yeto-round-profile-") as tmp:
        sink = rnd.Sink(Path(tmp))
        one_round(core, deltas, sink)                     # warm: pages faulted in, kernels loaded
        rounds = []
        for _ in range(args.reps):                        # a memcpy beside each round: a load that moves weighs on both
            memcpy = min(memcpy, rnd.memcpy_seconds(n, m + 4, 1))
            rounds.append(one_round(core, deltas, sink))
        best = min(rounds, key=lambda t: sum(t.values()))
    report(best, memcpy, n, m, args.threads)


if __name__ == "__main__":
    main()
