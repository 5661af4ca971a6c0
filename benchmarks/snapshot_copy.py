"""A fragment snapshot's copy on the round's path: into fresh arrays (what every snapshot did before its buffers were
reused) against into the fragment's reused snapshot buffers, side by side in one run, through the real
FragmentState.snapshot.

Each rep takes one snapshot of a fragment of `--values` values in each arm, alternating. The fresh arm gives the
fragment an empty buffer pool before each snapshot, so the copy lands in newly allocated arrays (their first touch
faults every page in); the reused arm keeps the pool, and the previous snapshot is dropped first (as once the writer
has written it). A plain NumPy copy of the same three rows into touched memory is printed beside them.

Since 2026-12-05 the copy runs on the copier thread (services/syncer/snapshot.py copy_later) and the fragment waits for
it before it next writes Θ, b or the shadow; each arm here waits for it too, so the copy itself is timed. `--beside`
times instead what it takes off the round's path: the three copies then the broadcast's chunks (a q4 delta of the same
fragment, hashed on `--threads` threads) on the main thread, against the copies on the copier thread beside the chunks,
interleaved, with how long the copier took to finish.

    python benchmarks/snapshot_copy.py [--values 64M] [--reps 5] [--json PATH]
    python benchmarks/snapshot_copy.py --beside [--values 16M] [--reps 7] [--threads 1]
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.codecs.base import set_threads
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import CHUNK_BYTES
from yeto.services.syncer.api import FragmentState, broadcast_chunks, copy_later

SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def count(text: str) -> int:
    return int(text[:-1]) * SUFFIX[text[-1].upper()] if text[-1].upper() in SUFFIX else int(text)


def fragment(n: int) -> FragmentState:
    h = FragmentHeader(run_id="bench", learner="l0", fragment=0, kind="init", fingerprint="f" * 64, codec="f32",
                       numel=n, c_tokens=0, c_steps=0, local_step=0, base_version=0, sha256="0" * 64)
    frag = FragmentState.adopt(h, np.random.default_rng(0).standard_normal(n, dtype=np.float32), "bench",
                               SyncConfig(num_fragments=1))
    frag.publish(snapshot_every=1)
    return frag


def timed_snapshot(frag: FragmentState, fresh: bool) -> float:
    if fresh:
        frag.snapshot_buffers = type(frag.snapshot_buffers)(frag.snapshot_buffers.alloc)
    gc.collect()
    start = time.perf_counter()
    snap = frag.snapshot({})
    frag.settle()                               # the copy done (on the copier thread)
    took = time.perf_counter() - start
    del snap
    return took


def beside(n: int, reps: int, threads: int) -> None:
    """The three copies on the main thread then the chunks, against the copies on the copier thread beside them."""
    set_threads(threads)
    rng = np.random.default_rng(0)
    src = [rng.standard_normal(n, dtype=np.float32) for _ in range(3)]
    dst = [np.empty(n, dtype=np.float32) for _ in range(3)]
    for d, s in zip(dst, src, strict=True):
        np.copyto(d, s)
    payload = codecs.Q4.encode(src[0])
    h = FragmentHeader(run_id="bench", fragment=0, kind="delta", fingerprint="f" * 64, codec="q4", numel=n,
                       sha256=sha256(payload))
    main_s, beside_s, done_s = [], [], []
    for _ in range(reps):
        start = time.perf_counter()
        for d, s in zip(dst, src, strict=True):
            np.copyto(d, s)
        broadcast_chunks(h, payload, CHUNK_BYTES)
        main_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        job = copy_later(list(zip(src, dst, strict=True)))
        broadcast_chunks(h, payload, CHUNK_BYTES)
        beside_s.append(time.perf_counter() - start)
        job.wait()
        done_s.append(time.perf_counter() - start)
    print(f"threads={threads}, {n} values: 3 row copies and a q4 delta's chunks, best of {reps} interleaved: copies on the "
          f"main thread {min(main_s) * 1e3:.1f} ms, on the copier thread beside {min(beside_s) * 1e3:.1f} ms "
          f"(the copier done after {min(done_s) * 1e3:.1f} ms)")
    print(f"snapshot_copy_main_over_beside={min(main_s) / min(beside_s):.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--values", default="64M", help="values in the fragment (K, M and G suffixes)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", help="write every rep's seconds here")
    parser.add_argument("--beside", action="store_true", help="the copy on the main thread against beside the chunks")
    parser.add_argument("--threads", type=int, default=1, help="with --beside: kernel and hashing threads")
    args = parser.parse_args(argv)
    n = count(args.values)
    if args.beside:
        beside(n, args.reps, args.threads)
        return
    frag = fragment(n)
    timed_snapshot(frag, fresh=False)          # the pool's set made once, as after a run's first snapshot
    times: dict[str, list[float]] = {"fresh": [], "reused": [], "memcpy": []}
    rows = [np.ones(n, dtype=np.float32) for _ in range(3)]        # touched: a copy into memory already in use
    for _ in range(args.reps):
        times["fresh"].append(timed_snapshot(frag, fresh=True))
        times["reused"].append(timed_snapshot(frag, fresh=False))
        start = time.perf_counter()
        for row, src in zip(rows, (frag.theta, frag.rows.momentum, frag.shadow.values), strict=True):
            np.copyto(row, src)
        times["memcpy"].append(time.perf_counter() - start)
    med = {arm: statistics.median(t) for arm, t in times.items()}
    print(f"one snapshot of a fragment of {n} values (theta, momentum, shadow: {3 * n * 4 / 2**20:.0f} MiB), "
          f"median of {args.reps} reps, arms alternating")
    for arm, t in times.items():
        print(f"  {arm:7s} {med[arm] * 1e3:9.1f} ms   reps: " + " ".join(f"{x * 1e3:.1f}" for x in t))
    if args.json:
        from lib_provenance import provenance
        with open(args.json, "w") as f:
            json.dump({"values": n, "times_s": times, "median_s": med, "provenance": provenance()}, f, indent=1)
    print(f"snapshot_copy_reused_over_fresh={med['reused'] / med['fresh']:.4f}")


if __name__ == "__main__":
    main()
