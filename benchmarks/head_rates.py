"""The syncer head's per-core rates, measured: what services/syncer/throughput.py's model is made of.

One thread, the compiled kernels (fused passes). For each codec a learner can push: its payload's intake (SHA-256 of
every chunk, then of the whole: two passes over the encoded bytes) and its decode with the Gram row (a push k of the
round folds k + 2 rows: the momentum, the k pushes before it and itself), fitted as seconds per value a + b (k + 2).
For each broadcast codec: the fused encode of theta - shadow that advances the shadow. Then the outer step over M
pushes (seconds per value c0 + c1 (M + 2)), and the snapshot's copies of three rows. Each time is the best of `--reps`;
the memcpy of one row is timed beside them so a loaded box shows. It prints the constants as throughput.py holds them
and, with `--check`, the model's round time against a round.py-style round measured here (model_error: measured over
modelled).

    .venv/bin/python benchmarks/head_rates.py [--values 4M] [--reps 5] [--check]
"""
from __future__ import annotations

import argparse
import hashlib
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import time

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.codecs.base import encode_delta
from yeto.services.syncer.api import FragmentRows, RowProducts, backend, merge_round, throughput


def best(fn, reps: int) -> float:
    top = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        top = min(top, time.perf_counter() - start)
    return top


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    b, a = np.polyfit(np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64), 1)
    return float(max(a, 0.0)), float(max(b, 0.0))


def ingest_rates(n: int, reps: int, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """Per push codec: (a, b) of decode-with-fold seconds per value = a + b (rows folded)."""
    out = {}
    rows = FragmentRows(rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32))
    for k in range(4):
        rows.push(k)[:] = rng.standard_normal(n, dtype=np.float32) * 1e-3
    for name in ("q4", "topk2", "topk4", "topk8", "bf16", "f32"):
        codec = codecs.codec(name)
        payload = codec.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3)
        xs, ys = [], []
        for k in range(4):
            def take(k: int = k, codec: codecs.Codec = codec, payload: bytes = payload) -> None:
                RowProducts(rows.rows[1:2 + k + 1], rows.push(k)).decode(codec, payload, n)
            xs.append(k + 2)
            ys.append(best(take, reps) / n)
        out[name] = fit(xs, ys)
    return out


def other_rates(n: int, reps: int, rng: np.random.Generator) -> dict[str, float]:
    chunk = rng.integers(0, 256, 4 << 20, dtype=np.uint8).tobytes()
    found = dict(sha256_s_per_byte=best(lambda: hashlib.sha256(chunk).digest(), reps) / len(chunk))
    rows = FragmentRows(rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32))
    for k in range(4):
        rows.push(k)[:] = rng.standard_normal(n, dtype=np.float32) * 1e-3
    steps = {m: best(lambda m=m: merge_round(rows, m, np.ones(m), merge="rda", lr=0.7, momentum=0.9), reps) / n
             for m in (1, 2, 4)}
    found["step_s_per_value"], found["step_s_per_value_row"] = fit([m + 2 for m in steps], list(steps.values()))
    theta = rng.standard_normal(n, dtype=np.float32)
    for name in ("q4", "topk2", "topk4", "topk8", "bf16", "f32"):
        shadow, codec = theta + rng.standard_normal(n, dtype=np.float32) * 1e-3, codecs.codec(name)
        found[f"broadcast_{name}_s_per_value"] = best(lambda c=codec, s=shadow: encode_delta(c, theta, s), reps) / n
    snap = np.empty_like(theta)
    found["copy_s_per_value_row"] = best(lambda: np.copyto(snap, theta), reps) / n
    return found


def check(n: int, reps: int, rates: throughput.Rates) -> None:
    """The model against a measured round of the same shape: 4 q4 pushes, q4 down, one thread."""
    import tempfile
    from pathlib import Path

    import round as rnd
    rng = np.random.default_rng(0)
    core = rnd.new_core(n, 4, rng)
    deltas = [codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3) for _ in range(4)]
    with tempfile.TemporaryDirectory() as tmp:
        b = rnd.run_config(core, deltas, reps, rnd.Sink(Path(tmp)))
    measured = b["ingest"] + b["perform"]
    modelled = throughput.round_seconds(n, learners=4, codec_up="q4", codec_down="q4", cores=1, rates=rates)
    print(f"round of {n} values, 4 q4 pushes, one thread: measured {measured * 1e3:.1f} ms, modelled {modelled * 1e3:.1f} ms")
    print(f"model_error={measured / modelled:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="4M", help="values per fragment (K, M suffixes)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--check", action="store_true", help="also time a whole round and print model_error")
    args = ap.parse_args()
    scale = {"K": 1 << 10, "M": 1 << 20}
    n = int(float(args.values[:-1]) * scale[args.values[-1]]) if args.values[-1] in scale else int(args.values)
    backend.set_threads(1)
    backend.use_kernels("compiled")
    rng = np.random.default_rng(0)
    src = rng.standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
    memcpy = best(lambda: np.copyto(dst, src), args.reps)
    ingest = ingest_rates(n, args.reps, rng)
    other = other_rates(n, args.reps, rng)
    print(f"one thread, {n} values; memcpy of one row {memcpy * 1e3:.2f} ms ({n / memcpy / 1e9:.2f} G values/s)")
    print(f"{'codec':>6} {'bytes/value':>11} {'ingest a ns':>12} {'ingest b ns/row':>16} {'4-push ingest Gv/s':>19} "
          f"{'broadcast Gv/s':>15}")
    for name, (a, b) in ingest.items():
        per_value = codecs.codec(name).encoded_size(1 << 20) / (1 << 20)
        four = 4 * a + b * (2 + 3 + 4 + 5) + 2 * 4 * per_value * other["sha256_s_per_byte"]
        print(f"{name:>6} {per_value:>11.4f} {a * 1e9:>12.3f} {b * 1e9:>16.3f} {4 / four / 1e9:>19.3f} "
              f"{1 / other[f'broadcast_{name}_s_per_value'] / 1e9:>15.3f}")
    print("rates, as throughput.Rates takes them:")
    print(f"    ingest={ {k: (round(a * 1e9, 3), round(b * 1e9, 3)) for k, (a, b) in ingest.items()} }")
    for key, value in other.items():
        print(f"    {key}={value * 1e9:.4f} ns")
    print(f"memcpy_s_per_value={memcpy / n * 1e9:.4f} ns")
    if args.check:
        check(n, args.reps, throughput.Rates())


if __name__ == "__main__":
    main()
