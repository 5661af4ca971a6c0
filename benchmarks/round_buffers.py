"""The round's two large byte arrays, fresh (as before 3595ca4) against from the process's reused pools, side by side in
one run: a push joined from its 4 MiB chunks (schemas/fragments.py: `b"".join` against PUSH_PAYLOADS) and the
broadcast's q4 delta (schemas/codecs/q4.py: a fresh payload array copied into fresh bytes against DELTA_PAYLOADS).

Each rep times one call of each arm, alternating, the arms' earlier results dropped first (as once a push is decoded
and a broadcast's chunks are out). A copy of the same bytes into touched memory is timed beside them. Medians of
`--reps`. On a VM whose memory the host backs on first touch a fresh array's pages cost far more than the copy; on
any machine they cost the page faults.

    python benchmarks/round_buffers.py [--values 64M] [--reps 7]
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.buffers import BufferPool
from yeto.schemas.codecs import q4
from yeto.schemas.codecs.base import encode_delta
from yeto.schemas.fragments import PUSH_PAYLOADS, FragmentHeader, join, sha256, split_chunks
from yeto.schemas.subjects import CHUNK_BYTES

SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def count(text: str) -> int:
    return int(text[:-1]) * SUFFIX[text[-1].upper()] if text[-1].upper() in SUFFIX else int(text)


def timed(fn) -> float:
    gc.collect()
    start = time.perf_counter()
    out = fn()
    took = time.perf_counter() - start
    del out
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="64M", help="values per fragment (K, M and G suffixes)")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    n = count(args.values)
    rng = np.random.default_rng(0)
    payload = codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3)
    h = FragmentHeader(run_id="bench", learner="l0", fragment=0, kind="push", fingerprint="f" * 64, codec="q4", numel=n,
                       c_tokens=1, c_steps=1, sha256=sha256(payload))
    parts = [c for _, c in split_chunks(h, payload, CHUNK_BYTES)]
    theta, shadow = rng.standard_normal(n, dtype=np.float32), np.zeros(n, dtype=np.float32)
    touched = np.empty(len(payload), dtype=np.uint8)
    touched[:] = 1
    source = np.frombuffer(payload, dtype=np.uint8)

    def fresh_delta() -> bytes:
        q4.DELTA_PAYLOADS = BufferPool()                 # a new array for the payload, then fresh bytes of it
        return bytes(encode_delta(codecs.Q4, theta, shadow))

    def pooled_delta() -> object:
        q4.DELTA_PAYLOADS = pool
        return encode_delta(codecs.Q4, theta, shadow)

    pool = BufferPool()
    arms = {"join_fresh": lambda: b"".join(parts), "join_pooled": lambda: join(h, parts),
            "delta_fresh": fresh_delta, "delta_pooled": pooled_delta,
            "copy_touched": lambda: np.copyto(touched, source)}
    for fn in arms.values():                             # kernels loaded, the pools' buffers made
        timed(fn)
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.reps):
        for name, fn in arms.items():
            times[name].append(timed(fn))
    print(f"values={n} payload_bytes={len(payload)} chunks={len(parts)} reps={args.reps} "
          f"push_pool_bytes={PUSH_PAYLOADS.nbytes} delta_pool_bytes={pool.nbytes}")
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:>13}: median {med[name] * 1e3:8.1f} ms  (min {min(t) * 1e3:.1f}, max {max(t) * 1e3:.1f})")
    print(f"join_pooled_over_fresh={med['join_pooled'] / med['join_fresh']:.3f}")
    print(f"delta_pooled_over_fresh={med['delta_pooled'] / med['delta_fresh']:.3f}")


if __name__ == "__main__":
    main()
