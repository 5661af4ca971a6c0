"""The syncer head's per-core rates, measured: what schemas/head_throughput.py's model is made of.

One thread, the compiled kernels (fused passes). For each codec a learner can push: its payload's intake (SHA-256 of
every chunk: one pass over the encoded bytes, the whole payload's digest made from theirs since 2026-12-05) and its
decode with the Gram row (folding k + 2 rows: the momentum, k pushes and itself), fitted as seconds per value
a + b (k + 2); since 2026-12-05 a dense push folds its own row alone (k + 2 = 1) and the merge's one pass over b and
the pushes takes the rest, timed as seconds per value and pair of rows (g, over 4 pushes: 10 pairs).
For each broadcast codec: the fused encode of theta - shadow that advances the shadow. Then the outer step over M
pushes (seconds per value c0 + c1 (M + 2)), and the snapshot's copies of three rows.
Since 2026-12-06 a q4 push is timed as the syncer takes it on a CPU head (services/syncer/gram.py `kept`, the default
since d7084cb): its bytes copied into the fragment's row of `encoded` and its squared norm taken from pieces decoded in
cache (seconds per value a, b = 0: no row is folded), and the Gram pass and the outer step read the 4 pushes kept
encoded, each piece decoded inside them (g and c0, c1 are the kept path's; a dense codec's f32 rows are read, not
decoded, so its pass and step are somewhat cheaper than these). Each time is the best of `--reps`;
the memcpy of one row is timed beside them so a loaded box shows. It prints the constants as head_throughput.py holds them
and, with `--check`, the model's round time against a round.py-style round measured here (model_error: measured over
modelled).

    .venv/bin/python benchmarks/head_rates.py [--values 4M] [--reps 5] [--check]
    .venv/bin/python benchmarks/head_rates.py --project [--interval 60]   # docs/HEAD.md's table, from the model alone
    .venv/bin/python benchmarks/head_rates.py --ingest --values 16M [--reps 7]   # one q4 push's intake, stage by stage

`--ingest` times one q4 push's way in on one thread, stage by stage: its chunks' SHA-256 (what the intake checks of each
chunk), the assembler (those checks, the "chunks" digest, the join into a pooled buffer), the decode with its squared
norm into a push row, and the whole: SyncerCore.receive of every chunk of a round's first push (admission included),
the round then completed untimed. Each stage's best of `--reps`, against the memcpy of one row beside it. With
`--against DIR` (a frozen copy of another commit, scripts/frozen.sh), the kernels of DIR's schemas/codecs/q4.py and
services/syncer/merge.py are loaded beside this tree's and timed interleaved in this one process: a q4 push's decode
with its squared norm and the outer step over 4 pushes, their bits compared.

    .venv/bin/python benchmarks/head_rates.py --ingest --values 16M --reps 7 --against /tmp/frozen-before
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
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.syncer_memory import syncer_memory
from yeto.services.syncer.api import (
    FragmentRows,
    RowProducts,
    backend,
    decode_with_norm,
    gram_pass,
    kept,
    kept_norm,
    merge_round,
    perform,
    throughput,
)


def best(fn, reps: int) -> float:
    """Best wall seconds of `reps` calls, after one untimed call (kernels compiled or loaded, pages faulted in)."""
    fn()
    top = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        top = min(top, time.perf_counter() - start)
    return top


def best_both(fn, reps: int) -> tuple[float, float]:
    """`best`, and the best CPU seconds of the process (all its threads) over the same calls: on a box shared with
    other work the CPU time leaves out the waits for a core that the wall time counts."""
    fn()
    wall = cpu = float("inf")
    for _ in range(reps):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    return wall, cpu


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
        if kept(codec):                                          # its bytes kept, its norm from them: no row folded
            kept_rows = FragmentRows(np.zeros(1, dtype=np.float32))
            out[name] = (best(lambda c=codec, p=payload, r=kept_rows: keep_with_norm(c, n, p, r), reps) / n, 0.0)
            continue
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
    for k in range(4):                                           # q4 pushes kept encoded, as the syncer holds them
        rows.keep_encoded(k, codecs.Q4, codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3), n)
    steps = {m: best(lambda m=m: merge_round(rows, m, np.ones(m), merge="rda", lr=0.7, momentum=0.9,
                                             g=np.eye(m) * 1e-6 * n, bd=np.zeros(m)), reps) / n
             for m in (1, 2, 4)}
    found["step_s_per_value"], found["step_s_per_value_row"] = fit([m + 2 for m in steps], list(steps.values()))
    theta = rng.standard_normal(n, dtype=np.float32)
    for name in ("q4", "topk2", "topk4", "topk8", "bf16", "f32"):
        shadow, codec = theta + rng.standard_normal(n, dtype=np.float32) * 1e-3, codecs.codec(name)
        found[f"broadcast_{name}_s_per_value"] = best(lambda c=codec, s=shadow: encode_delta(c, theta, s), reps) / n
    snap = np.empty_like(theta)
    found["copy_s_per_value_row"] = best(lambda: np.copyto(snap, theta), reps) / n
    need = np.tril(np.ones((5, 5), dtype=np.bool_), -1)          # b and 4 pushes: 10 pairs
    found["gram_pass_s_per_value_pair"] = best(lambda: gram_pass(rows.rows[1:6], need, rows.kept_of(4)), reps) / n / 10
    return found


def check(n: int, reps: int, rates: throughput.Rates) -> None:
    """The model, with the rates just measured, against a measured round of the same shape: 4 q4 pushes, q4 down,
    one thread."""
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


def keep_with_norm(codec, n: int, payload: bytes, rows) -> float:
    """What the syncer does with a q4 push it keeps encoded (fragment.py take_in): the bytes into a row, their norm."""
    return kept_norm(codec, rows.keep_encoded(0, codec, payload, n), n)


def ingest_stages(n: int, reps: int) -> None:
    """One q4 push's intake at n values, stage by stage (the module's docstring, `--ingest`)."""
    import tempfile
    from pathlib import Path

    import round as rnd
    rng = np.random.default_rng(0)
    core = rnd.new_core(n, 4, rng)
    deltas = [codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3) for _ in range(4)]
    first = split_chunks(rnd.header("l0", "push", "q4", n, deltas[0], step=1, base=0), deltas[0])
    row = np.zeros(n, dtype=np.float32)
    kept = FragmentRows(np.zeros(1, dtype=np.float32))
    src, dst = rng.standard_normal(n, dtype=np.float32), np.empty(n, dtype=np.float32)

    def assemble() -> None:
        assembler = type(core.assembler)()
        for h, c in first:
            payload = assembler.add(h, c)
        assert payload is not None

    stages = {"memcpy of one f32 row": best_both(lambda: np.copyto(dst, src), reps),
              "chunks' SHA-256": best_both(lambda: [hashlib.sha256(c).digest() for _, c in first], reps),
              "assembler (checks, digest, join)": best_both(assemble, reps),
              "decode with its squared norm": best_both(lambda: decode_with_norm(codecs.Q4, deltas[0], n, row), reps),
              "kept: bytes copied, norm from the codes": best_both(lambda: keep_with_norm(codecs.Q4, n, deltas[0], kept), reps)}
    took = []
    with tempfile.TemporaryDirectory() as tmp:
        sink = rnd.Sink(Path(tmp))
        for _ in range(reps + 1):                      # the first round compiles and faults pages in
            version = core.fragments[0].version
            pushes = [split_chunks(rnd.header(f"l{m}", "push", "q4", n, d, step=version + 1, base=version), d)
                      for m, d in enumerate(deltas)]
            for i in (0, 1):                           # the first push also takes Θ's norm (once a round)
                start, start_cpu = time.perf_counter(), time.process_time()
                for h, c in pushes[i]:
                    core.receive(h, c, next(rnd.CLOCK))
                took.append((time.perf_counter() - start, time.process_time() - start_cpu))
                assert core.refused is None and len(core.fragments[0].round.pending) == i + 1, "the push was not taken in"
            outputs = [o for chunks in pushes[2:] for h, c in chunks for o in core.receive(h, c, next(rnd.CLOCK))]
            perform(outputs, sink)
            if sink.writer is not None:
                sink.writer.join()
                sink.writer = None
    firsts, seconds = took[2::2], took[3::2]
    stages["receive: a round's first push"] = (min(t[0] for t in firsts), min(t[1] for t in firsts))
    whole = stages["receive: its second push"] = (min(t[0] for t in seconds), min(t[1] for t in seconds))
    print(f"one q4 push of {n} values ({len(deltas[0])} bytes, {len(first)} chunks), one thread, best of {reps}; "
          f"load {open('/proc/loadavg').read().split()[0]}")
    print(f"  {'stage':<40} {'wall ms':>8} {'CPU ms':>8} {'CPU ns/value':>12} {'G values/s (CPU)':>17}")
    for stage, (wall, cpu) in stages.items():
        print(f"  {stage:<40} {wall * 1e3:8.2f} {cpu * 1e3:8.2f} {cpu / n * 1e9:12.3f} {n / cpu / 1e9:17.3f}")
    print(f"ingest_g_values_per_s={n / whole[0] / 1e9:.3f} (wall), {n / whole[1] / 1e9:.3f} (CPU; a round's second push)")


def side_by_side(n: int, reps: int, against: str) -> None:
    """This tree's q4 decode-with-norm and M = 4 outer step against those of the tree at `against`, interleaved."""
    import importlib.util
    import sys
    import types
    from pathlib import Path

    from yeto.schemas.codecs import q4

    def load(name: str, path: str):
        spec = importlib.util.spec_from_file_location(name, Path(against) / path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)     # dataclasses look their module up
        spec.loader.exec_module(module)
        return module

    this_merge = types.SimpleNamespace(merge_round=merge_round)
    other_q4, other_merge = load("q4_against", "schemas/codecs/q4.py"), load("merge_against", "services/syncer/merge.py")
    rng = np.random.default_rng(0)
    payload = codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3)
    row, src, dst = np.zeros(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32), np.empty(n, dtype=np.float32)
    rows = FragmentRows(rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32))
    for k in range(4):
        rows.push(k)[:] = rng.standard_normal(n, dtype=np.float32) * 1e-3
    start_rows = rows.rows[:2].copy()

    products = np.zeros(1)

    def decode(codec) -> None:               # the face's decode with its squared norm, with either tree's codec
        products[0] = decode_with_norm(codec, payload, n, row)

    def step(module) -> None:
        rows.rows[:2] = start_rows
        rows.theta_bound = rows.momentum_bound = float("inf")     # the dry pass too, as after a loose bound
        assert module.merge_round(rows, 4, np.arange(1.0, 5.0), merge="rda", lr=0.7, momentum=0.9) is not None

    ways = {"decode with its squared norm": (lambda: decode(q4.Q4Codec()), lambda: decode(other_q4.Q4Codec())),
            "outer step, 4 pushes": (lambda: step(this_merge), lambda: step(other_merge))}
    for name, (here, there) in ways.items():          # the bits first, outside the timings (a copy out is not cheap)
        there()
        bits = row.tobytes() + products.tobytes() + rows.rows[:2].tobytes()
        here()
        assert bits == row.tobytes() + products.tobytes() + rows.rows[:2].tobytes(), f"{name}: other bits than {against}"
    best_of = {name: [float("inf")] * 6 for name in ways}    # wall of memcpy, A, B; then their CPU
    for _ in range(reps):
        for name, (here, there) in ways.items():
            for i, fn in enumerate((lambda: np.copyto(dst, src), there, here)):
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                best_of[name][i] = min(best_of[name][i], time.perf_counter() - start)
                best_of[name][3 + i] = min(best_of[name][3 + i], time.process_time() - start_cpu)
    print(f"side by side, {n} values, one thread, best of {reps} interleaved, the same bits; load "
          f"{open('/proc/loadavg').read().split()[0]}; A = {against}, B = this tree")
    for name, (memcpy, there, here, memcpy_cpu, there_cpu, here_cpu) in best_of.items():
        print(f"  {name:<30} wall A {there * 1e3:8.2f} ms  B {here * 1e3:8.2f} ms  A/B {there / here:6.3f};  CPU A "
              f"{there_cpu * 1e3:8.2f} ms  B {here_cpu * 1e3:8.2f} ms  A/B {there_cpu / here_cpu:6.3f}  (memcpy of one row "
              f"beside it: wall {memcpy * 1e3:.2f} ms, CPU {memcpy_cpu * 1e3:.2f} ms)")


# trainable values: LoRA r16 on every linear of Llama 3.1 8B (32 layers, 4096 wide, KV 1024, MLP 14336) and 70B (80,
# 8192, 1024, 28672): r (in + out) per matrix; full tuning of Llama 3.2 1B and 3.1 8B: their parameter counts
WORKLOADS = {"LoRA r16, 8B": 41_943_040, "LoRA r16, 70B": 207_093_760, "full, 1B": 1_235_814_400,
             "full, 8B": 8_030_261_248}


def project(interval_s: float, learners: int) -> None:
    """The head each workload needs under the model (default recipe: 8 fragments, q4 up and down)."""
    config = SyncConfig()
    up, down = codecs.codec(config.codec_up), codecs.codec(config.codec_down)
    print(f"model projection: {learners} learners, {config.num_fragments} fragments, {up.name} up, {down.name} down, "
          f"a fleet interval of {interval_s:.0f} s, rounds within half of it")
    print(f"{'workload':>14} {'values':>14} {'round 1 core s':>15} {'head':>22} {'busy s':>7} {'RAM GiB':>8} "
          f"{'NIC in MB':>10} {'NIC out MB':>11}")
    for name, values in WORKLOADS.items():
        per_fragment = -(-values // config.num_fragments)
        one = throughput.round_seconds(per_fragment, learners=learners, codec_up=up.name, codec_down=down.name)
        size = throughput.size_head(values, fragments=config.num_fragments, learners=learners, codec_up=up.name,
                                    codec_down=down.name, interval_s=interval_s)
        ram = syncer_memory(values, num_learners=learners, config=config, num_syncers=size.instances).head / 2**30
        nic_in = learners * up.encoded_size(per_fragment) * config.num_fragments / 1e6     # every fragment once
        nic_out = learners * down.encoded_size(per_fragment) * config.num_fragments / 1e6  # each learner a copy
        head = f"{size.instances} x {size.cores} cores" + ("" if size.fits else " (none)")
        print(f"{name:>14} {values:>14,} {one:>15.2f} {head:>22} {size.busy_s:>7.2f} {ram:>8.1f} {nic_in:>10.0f} "
              f"{nic_out:>11.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="4M", help="values per fragment (K, M suffixes)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--check", action="store_true", help="also time a whole round and print model_error")
    ap.add_argument("--project", action="store_true", help="print the model's head for LoRA and full tuning, measure nothing")
    ap.add_argument("--ingest", action="store_true", help="time one q4 push's intake stage by stage, nothing else")
    ap.add_argument("--against", help="with --ingest: a frozen copy of another commit, whose kernels are timed beside these")
    ap.add_argument("--interval", type=float, default=60.0, help="with --project: the fleet's seconds per H inner steps")
    ap.add_argument("--learners", type=int, default=4, help="with --project: pushes per round")
    args = ap.parse_args()
    if args.project:
        project(args.interval, args.learners)
        return
    scale = {"K": 1 << 10, "M": 1 << 20}
    n = int(float(args.values[:-1]) * scale[args.values[-1]]) if args.values[-1] in scale else int(args.values)
    backend.set_threads(1)
    backend.use_kernels("compiled")
    if args.ingest:
        ingest_stages(n, args.reps)
        if args.against:
            side_by_side(n, args.reps, args.against)
        return
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
        folded = 2 + 3 + 4 + 5 if hasattr(codecs.codec(name), "decode_entries") else 4     # dense: each its own square
        four = 4 * a + b * folded + 4 * per_value * other["sha256_s_per_byte"]
        print(f"{name:>6} {per_value:>11.4f} {a * 1e9:>12.3f} {b * 1e9:>16.3f} {4 / four / 1e9:>19.3f} "
              f"{1 / other[f'broadcast_{name}_s_per_value'] / 1e9:>15.3f}")
    rates = throughput.Rates(ingest=ingest, sha256_per_byte=other["sha256_s_per_byte"],
                             step_per_value=other["step_s_per_value"], step_per_value_row=other["step_s_per_value_row"],
                             broadcast={k: other[f"broadcast_{k}_s_per_value"] for k in ingest},
                             copy_per_value_row=other["copy_s_per_value_row"],
                             gram_pass_per_value_pair=other["gram_pass_s_per_value_pair"])
    print("rates in ns, as throughput.Rates holds them:")
    print(f"    ingest={ {k: (round(a * 1e9, 3), round(b * 1e9, 3)) for k, (a, b) in rates.ingest.items()} }")
    print(f"    broadcast={ {k: round(v * 1e9, 3) for k, v in rates.broadcast.items()} }")
    for key in ("sha256_per_byte", "step_per_value", "step_per_value_row", "copy_per_value_row", "gram_pass_per_value_pair"):
        print(f"    {key}={getattr(rates, key) * 1e9:.4f}")
    print(f"memcpy_s_per_value={memcpy / n * 1e9:.4f} ns")
    if args.check:
        check(n, args.reps, rates)


if __name__ == "__main__":
    main()
