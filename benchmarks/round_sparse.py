"""A round of sparse pushes (topk2/4/8) taken in and merged, dense-decode against (indices, values), side by side.

One fragment of `n` values, M learners each pushing one sparse payload: every push taken in (decode with its Gram
row: FragmentState.take_in, then add) and the round merged (weights, avg/RDA from G, the outer step), once with each
push decoded into a dense f32 row as before 2026-12-05 (`dense`) and once kept as (indices, values)
(services/syncer/sparse.py, `sparse`). Time: best of `--reps` rounds, the two interleaved in this process (round by
round), so a load that changes weighs on both. Peak memory: each arm's one round in a child process of its own, its
peak RSS over the round (VmHWM, reset just before it through /proc/self/clear_refs: compiling the kernels peaks
higher) and that peak's growth over the RSS before the round (the state, payloads and compiled kernels loaded first).
Printed as dense over sparse ratios, the load average beside them.

    .venv/bin/python benchmarks/round_sparse.py [--values 16M] [--learners 4] [--codec topk4] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.api import FragmentState, sparse

FP = "f" * 64
ARMS = ("dense", "sparse")


def header(learner: str, kind: str, codec: str, n: int, payload: bytes) -> FragmentHeader:
    return FragmentHeader(run_id="bench", learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=n,
                          c_tokens=1000, c_steps=8, local_step=8, base_version=0, sha256=sha256(payload))


def new_fragment(n: int, config: SyncConfig) -> FragmentState:
    theta = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    return FragmentState.adopt(header("l0", "init", "f32", n, b""), theta, "bench", config)


def one_round(frag: FragmentState, payloads: list[bytes], codec: str, config: SyncConfig, arm: str) -> dict[str, float]:
    """Seconds to take in every push and to merge them, with the arm's decode."""
    sparse.use_sparse_merge(arm == "sparse")
    n = frag.numel
    start = time.perf_counter()
    for m, payload in enumerate(payloads):
        h = header(f"l{m}", "push", codec, n, payload)
        frag.add(h, 0.0, frag.take_in(h, payload))
    ingest = time.perf_counter() - start
    headers = [p.header for p in frag.round.pending.values()]
    start = time.perf_counter()
    combo, *_ = frag.merge(headers, config, time.perf_counter)
    assert combo is not None, "the round did not merge"
    return dict(ingest=ingest, merge=time.perf_counter() - start)


def payloads_of(args: argparse.Namespace) -> list[bytes]:
    rng, codec = np.random.default_rng(1), codecs.codec(args.codec)
    return [codec.encode(rng.standard_normal(args.n, dtype=np.float32) * 1e-3) for _ in range(args.learners)]


def child(args: argparse.Namespace) -> None:
    """One round of `args.arm` on payloads read from `args.payloads`; its peak RSS and growth, as JSON on stdout."""
    data = np.load(args.payloads)
    payloads = [data[f"p{m}"].tobytes() for m in range(args.learners)]
    config = SyncConfig(num_fragments=1, quorum=args.learners)
    warm = new_fragment(4096, config)           # the kernels compiled (or loaded) before the round is measured
    one_round(warm, [codecs.codec(args.codec).encode(np.ones(4096, dtype=np.float32))] * 2, args.codec, config, args.arm)
    frag = new_fragment(args.n, config)
    Path("/proc/self/clear_refs").write_text("5")    # the peak RSS starts over here: compiling the kernels peaks higher
    before = status_kib("VmRSS")
    one_round(frag, payloads, args.codec, config, args.arm)
    peak = status_kib("VmHWM")
    print(json.dumps(dict(peak_kib=peak, growth_kib=peak - before)))


def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS: resident now; VmHWM: the peak since the last reset)."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="16M", help="values per fragment (K and M suffixes)")
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--codec", default="topk4", choices=[c for c in codecs.CODECS if c.startswith("topk")])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    ap.add_argument("--payloads", help=argparse.SUPPRESS)
    args = ap.parse_args()
    scale = {"K": 1 << 10, "M": 1 << 20}
    args.n = int(float(args.values[:-1]) * scale[args.values[-1]]) if args.values[-1] in scale else int(args.values)
    if args.arm:
        child(args)
        return
    payloads = payloads_of(args)
    config = SyncConfig(num_fragments=1, quorum=args.learners)
    frags = {arm: new_fragment(args.n, config) for arm in ARMS}
    best = {arm: dict(ingest=float("inf"), merge=float("inf"), total=float("inf")) for arm in ARMS}
    for _ in range(args.reps + 1):              # the first pass compiles and faults pages in: not counted
        for arm in ARMS:
            s = one_round(frags[arm], payloads, args.codec, config, arm)
            s["total"] = s["ingest"] + s["merge"]
            if _ > 0:
                best[arm] = {k: min(v, s[k]) for k, v in best[arm].items()}
    memory = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "payloads.npz"
        np.savez(path, **{f"p{m}": np.frombuffer(p, dtype=np.uint8) for m, p in enumerate(payloads)})
        for arm in ARMS:
            out = subprocess.run([sys.executable, __file__, "--arm", arm, "--payloads", str(path), "--values", args.values,
                                  "--learners", str(args.learners), "--codec", args.codec],
                                 check=True, capture_output=True, text=True).stdout
            memory[arm] = json.loads(out.strip().splitlines()[-1])
    print(f"{args.n} values, {args.learners} learners, {args.codec} pushes; best of {args.reps}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    print(f"{'arm':>7} {'ingest_ms':>10} {'merge_ms':>9} {'total_ms':>9} {'peak_MiB':>9} {'growth_MiB':>11}")
    for arm in ARMS:
        b, mem = best[arm], memory[arm]
        print(f"{arm:>7} {b['ingest'] * 1e3:>10.1f} {b['merge'] * 1e3:>9.1f} {b['total'] * 1e3:>9.1f} "
              f"{mem['peak_kib'] / 1024:>9.0f} {mem['growth_kib'] / 1024:>11.0f}")
    d, s = best["dense"], best["sparse"]
    ratios = dict(ingest_dense_over_sparse=d["ingest"] / s["ingest"], merge_dense_over_sparse=d["merge"] / s["merge"],
                  round_dense_over_sparse=d["total"] / s["total"],
                  peak_rss_dense_over_sparse=memory["dense"]["peak_kib"] / memory["sparse"]["peak_kib"],
                  rss_growth_dense_over_sparse=memory["dense"]["growth_kib"] / max(1, memory["sparse"]["growth_kib"]))
    for name, value in ratios.items():
        print(f"{name} {value:.2f}")


if __name__ == "__main__":
    main()
