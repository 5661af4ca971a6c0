"""Merge plus Nesterov outer step for 4 learners over 256 MiB of fragments, against memcpy in the same run.

Throughput is counted in logical bytes: each push, theta and momentum read once, theta and momentum
written once ((M + 4) * 4 bytes per value), whatever the implementation really moves; memcpy is counted
as read + write. Extra passes (the Gram pass that RDA and the finiteness check need) cost time but add
no bytes. The syncer builds the Gram matrix one row per push as pushes arrive (gram.gram_row), so the
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
from yeto.services.syncer import backend, gram, merge, rows

LR, MU = 0.7, 0.9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--fragments", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    m, n = args.learners, (args.mib << 20) // 4 // args.fragments
    rng = np.random.default_rng(0)
    frags = []
    for _ in range(args.fragments):
        f = rows.FragmentRows(rng.standard_normal(n, dtype=np.float32), slots=m)
        for i in range(m):
            f.push(i)[:] = backend.to_device(rng.standard_normal(n, dtype=np.float32) * 1e-3)
        f.refresh_bounds()
        frags.append(f)
    weights = np.arange(1, m + 1, dtype=np.float64)
    fulls = [gram.gram(f.rows[1:2 + m]) for f in frags]          # b and the pushes: G and [<d_m, b>]
    grams = [(full[1:, 1:], full[0, 1:]) for full in fulls]
    dst = backend.empty(n)

    def memcpy():
        for f in frags:
            backend.xp.copyto(dst, f.theta)

    def yeto(kind):              # as the syncer merges: G came row by row at ingest
        def run():
            for f, (g, bd) in zip(frags, grams):
                assert merge.merge_round(f, m, weights, merge=kind, lr=LR, momentum=MU, g=g, bd=bd) is not None
        return run

    def yeto_gram_at_merge():    # the Gram pass inside the merge (before the syncer built G at ingest)
        for f in frags:
            assert merge.merge_round(f, m, weights, merge="rda", lr=LR, momentum=MU) is not None

    def ingest_gram():           # what the pushes cost as they arrive: push k's products with b and rows 0..k
        for f in frags:
            for k in range(m):
                gram.gram_row(f.rows[1:2 + k + 1], f.rows[2 + k])

    payload = codecs.Q4.encode(backend.to_host(frags[0].rows[2]))   # one q4 push, decoded into every push row

    def ingest_decode_then_gram():   # q4 decode into the row, then its Gram row (reads the row back)
        for f in frags:
            for k in range(m):
                if backend.GPU:          # as FragmentState.take_in on the GPU: the bytes copied over, decoded there
                    backend.decode_into(codecs.Q4, payload, n, f.rows[2 + k])
                else:
                    codecs.Q4.decode(payload, n, out=f.rows[2 + k])
                gram.gram_row(f.rows[1:2 + k + 1], f.rows[2 + k])

    def ingest_fused():              # as the syncer ingests: the Gram row taken while each stretch is decoded
        for f in frags:
            for k in range(m):
                acc = gram.RowProducts(f.rows[1:2 + k + 1], f.rows[2 + k])
                codecs.Q4.decode(payload, n, out=f.rows[2 + k], on_chunk=acc)

    def ingest_fused_without_b():    # the same without b's row (before RoundMerged.momentum_cos): its cost, side by side
        for f in frags:
            for k in range(m):
                acc = gram.RowProducts(f.rows[2:2 + k + 1], f.rows[2 + k])
                codecs.Q4.decode(payload, n, out=f.rows[2 + k], on_chunk=acc)

    def naive_numpy():
        w = weights / weights.sum()
        for f in frags:
            delta = -sum(wi * f.rows[2 + i] for i, wi in enumerate(w.astype(np.float32)))
            b = f.momentum
            b *= MU
            b += delta
            f.theta[:] = f.theta - LR * (delta + MU * b)

    variants = {"memcpy": memcpy, "yeto_rda": yeto("rda"), "yeto_avg": yeto("avg"),
                "yeto_rda_gram_at_merge": yeto_gram_at_merge, "naive_numpy": naive_numpy}
    try:
        import torch
        torch.set_num_threads(1)
        views = [torch.from_dlpack(f.rows) if backend.GPU else torch.from_numpy(f.rows) for f in frags]

        def naive_torch():
            w = (weights / weights.sum()).tolist()
            for r in views:
                delta = torch.zeros_like(r[0])
                for i, wi in enumerate(w):
                    delta.add_(r[2 + i], alpha=-wi)
                r[1].mul_(MU).add_(delta)
                r[0].sub_(delta.add_(r[1], alpha=MU), alpha=LR)
        variants["naive_torch"] = naive_torch
    except ImportError:
        print("torch not installed: naive torch variant skipped")
    timed = {**variants, "ingest_gram": ingest_gram, "ingest_decode_then_gram": ingest_decode_then_gram}
    if not backend.GPU:              # the fused decode writes host memory as it goes: the CPU syncer's path
        timed["ingest_fused"] = ingest_fused
        timed["ingest_fused_without_b"] = ingest_fused_without_b
    best = dict.fromkeys(timed, float("inf"))
    for _ in range(args.reps):
        for name, fn in timed.items():
            start = time.perf_counter()
            fn()
            backend.synchronize()
            best[name] = min(best[name], time.perf_counter() - start)
    total = 4 * n * args.fragments
    memcpy_bps = 2 * total / best["memcpy"]
    print(f"backend={backend.NAME} fragments={args.fragments}x{n * 4 >> 20} MiB learners={m} reps={args.reps}")
    print(f"memcpy: {memcpy_bps / 1e9:.2f} GB/s (read + write)")
    for name, seconds in best.items():
        if not name.startswith(("memcpy", "ingest")):
            bps = (m + 4) * total / seconds
            print(f"{name:>20}: {seconds * 1e3:8.1f} ms  {bps / 1e9:6.2f} GB/s  {bps / memcpy_bps:.3f} x memcpy")
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
    if backend.GPU:
        print("CuPy backend active: the numbers above are device memory throughput")
    else:
        print("no CUDA device (or no cupy): the CuPy variant is skipped")
    print(f"merge_vs_memcpy={(m + 4) * total / best['yeto_rda'] / memcpy_bps:.3f}")


if __name__ == "__main__":
    main()
