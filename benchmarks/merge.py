"""Merge plus Nesterov outer step for 4 learners over 256 MiB of fragments, against memcpy in the same run.

Throughput is counted in logical bytes: each push, theta and momentum read once, theta and momentum
written once ((M + 4) * 4 bytes per value), whatever the implementation really moves; memcpy is counted
as read + write. Extra passes (the Gram pass that RDA and the finiteness check need) cost time but add
no bytes. The syncer builds the Gram matrix one row per push as pushes arrive (gram_row), so the
round's merge is the fused step alone: that is the headline; the Gram work at ingest is timed apart, and
`yeto_rda_gram_at_merge` is the older way (a Gram pass inside the merge). Variants run interleaved and
the best of the repetitions is kept, so a noisy shared machine disturbs them alike.

    .venv/bin/python benchmarks/merge.py [--mib 256] [--learners 4] [--fragments 8] [--reps 5]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # single-threaded, like memcpy: a fair ratio
import time

import numpy as np

from yeto.schemas import codecs
from yeto.services.syncer.api import FragmentRows, RowProducts, backend, gram, gram_row, merge_round

LR, MU = 0.7, 0.9


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--fragments", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    return ap.parse_args()


class Round:
    """`fragments` fragments of `n` values with `m` pushes each, and every way of merging or ingesting them timed here."""

    def __init__(self, fragments: int, m: int, n: int) -> None:
        rng = np.random.default_rng(0)
        self.m, self.n, self.frags = m, n, []
        for _ in range(fragments):
            f = FragmentRows(rng.standard_normal(n, dtype=np.float32), slots=m)
            for i in range(m):
                f.push(i)[:] = backend.to_device(rng.standard_normal(n, dtype=np.float32) * 1e-3)
            f.refresh_bounds()
            self.frags.append(f)
        self.weights = np.arange(1, m + 1, dtype=np.float64)
        fulls = [gram(f.rows[1:2 + m]) for f in self.frags]          # b and the pushes: G and [<d_m, b>]
        self.grams = [(full[1:, 1:], full[0, 1:]) for full in fulls]
        self.dst = backend.empty(n)
        self.payload = codecs.Q4.encode(backend.to_host(self.frags[0].rows[2]))   # one q4 push, decoded into every row

    def memcpy(self) -> None:
        for f in self.frags:
            backend.xp.copyto(self.dst, f.theta)

    def yeto(self, kind: str):     # as the syncer merges: G came row by row at ingest
        def run() -> None:
            for f, (g, bd) in zip(self.frags, self.grams):
                assert merge_round(f, self.m, self.weights, merge=kind, lr=LR, momentum=MU, g=g, bd=bd) is not None
        return run

    def yeto_gram_at_merge(self) -> None:    # the Gram pass inside the merge (before the syncer built G at ingest)
        for f in self.frags:
            assert merge_round(f, self.m, self.weights, merge="rda", lr=LR, momentum=MU) is not None

    def ingest_gram(self) -> None:           # what the pushes cost as they arrive: push k's products with b and rows 0..k
        for f in self.frags:
            for k in range(self.m):
                gram_row(f.rows[1:2 + k + 1], f.rows[2 + k])

    def ingest_decode_then_gram(self) -> None:   # q4 decode into the row, then its Gram row (reads the row back)
        for f in self.frags:
            for k in range(self.m):
                if backend.GPU:          # as FragmentState.take_in on the GPU: the bytes copied over, decoded there
                    backend.decode_into(codecs.Q4, self.payload, self.n, f.rows[2 + k])
                else:
                    codecs.Q4.decode(self.payload, self.n, out=f.rows[2 + k])
                gram_row(f.rows[1:2 + k + 1], f.rows[2 + k])

    def ingest_fused(self, first: int = 1):
        """As the syncer ingests: the Gram row taken while each stretch is decoded; `first=2` leaves out b's row (as
        before RoundMerged.momentum_cos), to show its cost side by side."""
        def run() -> None:
            for f in self.frags:
                for k in range(self.m):
                    acc = RowProducts(f.rows[first:2 + k + 1], f.rows[2 + k])
                    codecs.Q4.decode(self.payload, self.n, out=f.rows[2 + k], on_chunk=acc)
        return run

    def naive_numpy(self) -> None:
        w = self.weights / self.weights.sum()
        for f in self.frags:
            delta = -sum(wi * f.rows[2 + i] for i, wi in enumerate(w.astype(np.float32)))
            b = f.momentum
            b *= MU
            b += delta
            f.theta[:] = f.theta - LR * (delta + MU * b)

    def naive_torch(self):
        """The same step written with torch in-place ops, or None without torch."""
        try:
            import torch
        except ImportError:
            print("torch not installed: naive torch variant skipped")
            return None
        torch.set_num_threads(1)
        views = [torch.from_dlpack(f.rows) if backend.GPU else torch.from_numpy(f.rows) for f in self.frags]

        def run() -> None:
            w = (self.weights / self.weights.sum()).tolist()
            for r in views:
                delta = torch.zeros_like(r[0])
                for i, wi in enumerate(w):
                    delta.add_(r[2 + i], alpha=-wi)
                r[1].mul_(MU).add_(delta)
                r[0].sub_(delta.add_(r[1], alpha=MU), alpha=LR)
        return run

    def timed(self) -> dict:
        """Every variant by name: the merges first, then the ingest paths this backend runs."""
        out = {"memcpy": self.memcpy, "yeto_rda": self.yeto("rda"), "yeto_avg": self.yeto("avg"),
               "yeto_rda_gram_at_merge": self.yeto_gram_at_merge, "naive_numpy": self.naive_numpy}
        if (naive_torch := self.naive_torch()) is not None:
            out["naive_torch"] = naive_torch
        out |= {"ingest_gram": self.ingest_gram, "ingest_decode_then_gram": self.ingest_decode_then_gram}
        if not backend.GPU:              # the fused decode writes host memory as it goes: the CPU syncer's path
            out |= {"ingest_fused": self.ingest_fused(), "ingest_fused_without_b": self.ingest_fused(first=2)}
        return out


def best_seconds(timed: dict, reps: int, cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Each variant's best time over `reps` rounds, the variants interleaved within a round; `cpu`, when given, gets
    each variant's best process CPU time (all threads) of the same calls: on a box shared with other work it leaves
    out the waits for a core that the wall time counts (the host's memory is shared all the same)."""
    best = dict.fromkeys(timed, float("inf"))
    for _ in range(reps):
        for name, fn in timed.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            backend.synchronize()
            best[name] = min(best[name], time.perf_counter() - start)
            if cpu is not None:
                cpu[name] = min(cpu.get(name, float("inf")), time.process_time() - start_cpu)
    return best


def report_merges(best: dict[str, float], *, m: int, total: int, memcpy_bps: float) -> None:
    for name, seconds in best.items():
        if not name.startswith(("memcpy", "ingest")):
            bps = (m + 4) * total / seconds
            print(f"{name:>20}: {seconds * 1e3:8.1f} ms  {bps / 1e9:6.2f} GB/s  {bps / memcpy_bps:.3f} x memcpy")


def report_ingest(best: dict[str, float], *, m: int, total: int, memcpy_bps: float) -> None:
    ingest = best["ingest_gram"]
    print(f"{'ingest_gram':>20}: {ingest * 1e3:8.1f} ms  Gram rows as the {m} pushes arrive, "
          f"{ingest / (m * best['memcpy']):.2f} x the time of copying them; RDA step + ingest together: "
          f"{(m + 4) * total / (best['yeto_rda'] + ingest) / memcpy_bps:.3f} x memcpy")
    if "ingest_fused" in best:
        print(f"{'ingest (q4 decode + Gram row), all pushes':>20}: decode then Gram "
              f"{best['ingest_decode_then_gram'] * 1e3:.1f} ms, fused {best['ingest_fused'] * 1e3:.1f} ms "
              f"({best['ingest_decode_then_gram'] / best['ingest_fused']:.2f}x faster)")
        print(f"ingest_with_momentum_row_over_without={best['ingest_fused'] / best['ingest_fused_without_b']:.3f}"
              f"  (fused ingest with b's row, for cos(delta, b), over the same without it)")
    else:
        print(f"{'ingest (q4 bytes to the device, decode there, Gram row), all pushes':>20}: "
              f"{best['ingest_decode_then_gram'] * 1e3:.1f} ms")


def main() -> None:
    args = parse()
    m, n = args.learners, (args.mib << 20) // 4 // args.fragments
    cpu: dict[str, float] = {}
    best = best_seconds(Round(args.fragments, m, n).timed(), args.reps, cpu)
    total = 4 * n * args.fragments
    memcpy_bps = 2 * total / best["memcpy"]
    print(f"backend={backend.NAME} fragments={args.fragments}x{n * 4 >> 20} MiB learners={m} reps={args.reps}")
    print(f"memcpy: {memcpy_bps / 1e9:.2f} GB/s (read + write)")
    report_merges(best, m=m, total=total, memcpy_bps=memcpy_bps)
    report_ingest(best, m=m, total=total, memcpy_bps=memcpy_bps)
    if backend.GPU:
        print("CuPy backend active: the numbers above are device memory throughput")
    else:
        print("no CUDA device (or no cupy): the CuPy variant is skipped")
    print(f"merge_vs_memcpy_cpu={4 * (m + 4) / 8 * cpu['memcpy'] / cpu['yeto_rda']:.3f}  (the same ratio from process CPU "
          f"times: memcpy {cpu['memcpy'] * 1e3:.1f} ms, yeto_rda {cpu['yeto_rda'] * 1e3:.1f} ms)")
    print(f"merge_vs_memcpy={(m + 4) * total / best['yeto_rda'] / memcpy_bps:.3f}")


if __name__ == "__main__":
    main()
