"""A round's Gram matrix two ways, side by side in one process: each push's row folded as it is decoded (push k reads
the momentum and the k pushes before it again: k + 2 rows) against each push decoded with its squared norm and one
pass over b and the pushes at the merge (services/syncer/gram.py `gram_pass`). The same bits (checked here on every
rep); the ways alternate rep by rep, best of `--reps`, with a memcpy of one row beside each rep. Beside the wall time, the
process's CPU time (all threads): on a loaded box the wall time is mostly the scheduler's, the CPU time is the work.

    python benchmarks/round_gram.py [--values 16M] [--learners 4] [--reps 7] [--threads 1]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import round as rnd

from yeto.schemas import codecs
from yeto.services.syncer.api import FragmentRows, RowProducts, backend, decode_with_norm, gram_pass


def incremental(rows: FragmentRows, payloads: list[bytes], n: int) -> np.ndarray:
    g = np.zeros((len(payloads) + 1, len(payloads) + 1))
    for k, payload in enumerate(payloads):
        acc = RowProducts(rows.rows[1:2 + k + 1], rows.push(k))
        acc.decode(codecs.Q4, payload, n)
        g[1 + k, :k + 2] = g[:k + 2, 1 + k] = acc.products
    return g


def at_merge(rows: FragmentRows, payloads: list[bytes], n: int) -> np.ndarray:
    m = len(payloads)
    norms = [decode_with_norm(codecs.Q4, payload, n, rows.push(k)) for k, payload in enumerate(payloads)]
    g = gram_pass(rows.rows[1:2 + m], np.tril(np.ones((m + 1, m + 1), dtype=np.bool_), -1))
    g[np.arange(1, m + 1), np.arange(1, m + 1)] = norms
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="16M")
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    n, m = rnd.parse_sizes(args.values)[0], args.learners
    backend.set_threads(args.threads)
    backend.use_kernels("compiled")
    rng = np.random.default_rng(0)
    rows = FragmentRows(rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32), slots=m)
    payloads = [codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3) for _ in range(m)]
    ways = {"incremental": incremental, "at_merge": at_merge}
    best = dict.fromkeys(ways, float("inf"))
    cpu = dict.fromkeys(ways, float("inf"))
    memcpy = float("inf")
    for _ in range(args.reps + 1):                 # the first rep warms (kernels, pages) and counts too
        memcpy = min(memcpy, rnd.memcpy_seconds(n, 1, 0))
        got = {}
        for name, way in ways.items():
            start, used = time.perf_counter(), time.process_time()
            got[name] = way(rows, payloads, n)
            best[name] = min(best[name], time.perf_counter() - start)
            cpu[name] = min(cpu[name], time.process_time() - used)
        assert got["incremental"].tobytes() == got["at_merge"].tobytes(), "the two ways gave different bits"
    print(f"{n} values, {m} q4 pushes, {args.threads} thread(s), best of {args.reps + 1} alternating; memcpy of one row "
          f"{memcpy * 1e3:.1f} ms")
    for name, seconds in best.items():
        print(f"  {name:12s} {seconds * 1e3:8.1f} ms  {seconds / memcpy:6.2f}x one row's memcpy   CPU {cpu[name] * 1e3:8.1f} ms")
    print(f"gram_incremental_over_at_merge={best['incremental'] / best['at_merge']:.3f}")
    print(f"gram_cpu_incremental_over_at_merge={cpu['incremental'] / cpu['at_merge']:.3f}")


if __name__ == "__main__":
    main()
