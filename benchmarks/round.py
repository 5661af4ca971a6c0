"""The whole syncer round through the real SyncerCore, stage by stage, against memcpy of the same bytes in one run.

One round of one fragment of `n` values with M learners, as the data plane drives it: every push's q4 chunks
taken in (admission, reassembly, q4 decode with its Gram row), the merge and Nesterov outer step (the
RoundMerged event's merge_ms), the broadcast (q4 encode of Θ − shadow, the shadow advanced by the decoded
delta, a keyframe every `keyframe_every` versions), then the outputs performed in order (outputs.py): the
broadcast's chunks, the events, and the snapshot, written and fsynced by a worker thread as the data plane
does (durable.py), off the round's critical path. The round's critical path (intake to the last chunk out)
is measured with that write running beside it; every other round writes in the path instead (as before
durable.py: the round's critical path held the write), so the two compare in one run, rounds alternating.
Every stage's wall time is divided by the wall time of one memcpy of the bytes the round's rows hold
((M + 4) f32 rows: pushes, Θ, momentum, shadow, the decode target), timed in the same run, so the ratios are
wall over wall. The older `merge_vs_memcpy` of benchmarks/merge.py counts logical bytes; here
`merge_logical_bytes_per_s_over_memcpy` is that figure, named for what it is. Best of `--reps` rounds per size, the
configurations interleaved (one round of each, then the next of each; since 2026-12-05) with a memcpy timed in every
pass, so a load that changes during the run weighs on all of them alike.
The memcpy copies a row that was written first, (M + 4) times: an untouched source is the kernel's zero page, read
from cache, which made the memcpy (and every ratio's denominator) about 3x too fast before 2026-12-04.

Each size runs once per `--kernels` (compiled: the numba kernels with the fused passes, the default; separate: the same
kernels one pass each, as on 2026-12-04; reference: the NumPy code they replaced) and `--threads` count, on the same
rows in one run, so `<a>_over_<b>_critical_path_*` (kernels a's critical path over the next one's, at the most
threads) and `threads_speedup_*` (1 thread over the most) are ratios of one run. The memcpy is one thread throughout.

`--gram incremental,at-merge,kept` runs each configuration with a dense push's Gram row folded as it is decoded (k + 2
rows read for push k, as before 2026-12-05), with the merge's one pass over the f32 rows (services/syncer/gram.py), and
with a q4 push's bytes kept and decoded inside the merge's passes (no f32 row written; the default since 2026-12-06),
the same bits; `<a>_over_<b>_critical_path_*` is the ratio of two neighbours in the run.

`--norm first-push,after-broadcast` runs each configuration with Θ's norm for admission's bound taken by a version's
first push (as before 2026-12-06) or begun on its own thread once the version's broadcast chunks are out
(services/syncer/fragment.py `norm_after_broadcast`, the default); as the configurations alternate, each round begins
with the version's norm as its own mode leaves it (taken already, or not). Every run prints the ingest per core of a round's
first push and of its later ones (the pushes between the first and the last: the last one's receive also merges and
encodes), values per second of the process's CPU time (every thread's) and of wall time, best of the rounds:
`ingest_first_push_G_values_per_cpu_s_*`, `ingest_later_push_G_values_per_cpu_s_*` (and `_per_wall_s_`).

`--spread off,on` runs each configuration with the steps that ran on one thread whatever `--threads` (the broadcast's
chunks copied and hashed, a kept push's bytes copied, Θ's norm for admission) on the calling thread and on the kernel
threads (schemas/codecs/base.py `spread`; on since 2026-12-06). `--copy beside,after` begins the snapshot's copy of Θ, b
and the shadow as the snapshot is made, beside the broadcast's chunks (as from a01c8f7), or once the chunks are out
(services/syncer/snapshot.py `copy_after_chunks`; the default since 2026-12-06).

    .venv/bin/python benchmarks/round.py [--values 1M,4M,16M] [--learners 4] [--reps 3] [--threads 1,2]
        [--kernels reference,separate,compiled] [--gram incremental,at-merge,kept] [--spread off,on] [--copy beside,after]
        [--norm first-push,after-broadcast]
"""
from __future__ import annotations

import argparse
import itertools
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # single-threaded, like memcpy: a fair ratio
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.codecs.base import encode_delta, spread_on
from yeto.schemas.fragments import FragmentHeader, prehashed, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import CHUNK_BYTES
from yeto.schemas.training import RoundMerged
from yeto.services.syncer.api import (
    SyncerCore,
    backend,
    copy_after_chunks,
    gram_at_merge,
    keep_encoded,
    norm_after_broadcast,
    perform,
    write_snapshot,
)

FP = "f" * 64
STAGES = ("ingest", "merge", "broadcast_encode", "chunking", "snapshot")


class Sink:
    """Where the round's outputs go: the snapshot to disk (fsynced) by a worker thread, the broadcast's chunks counted."""

    chunk_bytes = CHUNK_BYTES

    def __init__(self, directory: Path) -> None:
        self.dir, self.seconds, self.events, self.bytes_out = directory, dict.fromkeys(("snapshot", "chunking"), 0.0), [], 0
        self._mark = time.perf_counter()
        self.writer: threading.Thread | None = None
        self.in_path = False             # write in the round's path (the order before durable.py)

    def snapshot(self, snap) -> None:
        start = time.perf_counter()
        write_snapshot(self.dir, snap)
        self.seconds["snapshot"] += time.perf_counter() - start
        self._mark = time.perf_counter()

    def snapshot_later(self, snap) -> None:
        """As the data plane: the write runs in a thread (the GIL released in write and fsync) beside what follows."""
        self.writer = threading.Thread(target=self.snapshot, args=(snap,))
        self.writer.start()
        if self.in_path:
            self.writer.join()

    def chunk(self, header, chunk) -> None:
        self.bytes_out += len(chunk)
        now = time.perf_counter()
        self.seconds["chunking"] += now - self._mark
        self._mark = now

    def event(self, event) -> None:
        self.events.append(event)

    def wake(self, at) -> None:
        pass


# The core's clock: 1 ms per chunk, whatever the wall time. With the wall clock, a 64M-value round (seconds of ingest on
# a GPU head) outlasted the learners' liveness window (nobody heartbeats here) and merged early on a smaller quorum.
CLOCK = (i * 1e-3 for i in itertools.count())


def header(learner: str, kind: str, codec: str, n: int, payload: bytes, *, step: int, base: int) -> FragmentHeader:
    return FragmentHeader(run_id="bench", learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=n,
                          c_tokens=1000, c_steps=8, local_step=step, base_version=base, sha256=sha256(payload))


def one_round(core: SyncerCore, pushes: list[list[tuple]], sink: Sink) -> dict[str, float]:
    """Take in every push's chunks (the last chunk closes the round), perform the outputs; seconds per stage."""
    ingest, outputs, per_push = 0.0, [], []
    cpu = time.process_time()
    for chunks in pushes:      # one push's chunks as one fetched batch: hashed at once, as the data plane does
        start, push_cpu = time.perf_counter(), time.process_time()
        with prehashed([c for _, c in chunks]):
            for h, c in chunks:
                outputs += core.receive(h, c, next(CLOCK))
        per_push.append((time.process_time() - push_cpu, time.perf_counter() - start))
        ingest += time.perf_counter() - start
    later = per_push[1:-1] or [(float("nan"), float("nan"))]    # the last push's receive merges and encodes too
    pushes_s = dict(first_cpu=per_push[0][0], first_wall=per_push[0][1],
                    later_cpu=sum(c for c, _ in later) / len(later), later_wall=sum(w for _, w in later) / len(later))
    merged = [o for o in outputs if isinstance(o, RoundMerged)]
    assert len(merged) == 1, f"the round did not merge: {[type(o).__name__ for o in outputs]}"
    merge_s = merged[0].merge_ms / 1e3
    sink.seconds = dict.fromkeys(sink.seconds, 0.0)
    start = time.perf_counter()
    perform(outputs, sink)
    perform_s = time.perf_counter() - start
    assert sink.writer is not None, "the round wrote no snapshot"
    sink.writer.join()                  # done before the next round, so each round's write is timed alone
    sink.writer = None
    cpu = time.process_time() - cpu     # every thread's CPU over the round, the write's included (the same bytes each way)
    # The last receive did the merge and the broadcast encode after its chunk's ingest: split it by the event's
    # merge_ms and the encode timed on its own below (run_size), so `ingest` is the chunks' intake alone.
    return dict(ingest=ingest, merge=merge_s, perform=perform_s, cpu=cpu, **pushes_s, **sink.seconds)


def new_core(n: int, learners: int, rng: np.random.Generator) -> SyncerCore:
    """A SyncerCore holding version 0 of one fragment of `n` values, from every learner's f32 init."""
    config = SyncConfig(num_fragments=1, quorum=learners, keyframe_every=1 << 30, snapshot_every=1)
    core = SyncerCore(config, run_id="bench", fingerprint=FP)
    payload = codecs.F32.encode(rng.standard_normal(n, dtype=np.float32))
    for m in range(learners):
        for h, c in split_chunks(header(f"l{m}", "init", "f32", n, payload, step=0, base=0), payload):
            core.receive(h, c, next(CLOCK))
    return core


def memcpy_seconds(n: int, rows: int, reps: int) -> float:
    """Best wall time of copying `rows` rows of `n` f32 (a written source: not the zero page), one thread."""
    src = backend.xp.ones(n, dtype=np.float32)
    dst = backend.xp.empty_like(src)
    best = float("inf")
    for _ in range(reps + 1):                                      # the first one faults dst's pages in
        backend.synchronize()
        start = time.perf_counter()
        for _ in range(rows):
            backend.xp.copyto(dst, src)
        backend.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def run_config(core: SyncerCore, deltas: list[bytes], reps: int, sink: Sink) -> dict[str, float]:
    """Best seconds per stage of `reps` rounds with the write beside, and of `reps` with it in the path."""
    n = core.fragments[0].numel
    best = dict.fromkeys(("ingest", "merge", "perform", "snapshot", "chunking", "broadcast_encode", "in_path", "cpu",
                          "first_cpu", "first_wall", "later_cpu", "later_wall"), float("inf"))
    theta = core.fragments[0].theta
    for rep in range(2 * reps):                                    # even: the write beside; odd: in the path
        version = core.fragments[0].version
        pushes = [split_chunks(header(f"l{m}", "push", "q4", n, d, step=version + 1, base=version), d)
                  for m, d in enumerate(deltas)]
        sink.in_path = rep % 2 == 1
        stages = one_round(core, pushes, sink)
        if sink.in_path:
            best["in_path"] = min(best["in_path"], stages["ingest"] + stages["perform"])
            continue
        for stage, seconds in stages.items():
            best[stage] = min(best[stage], seconds)
        shadow = core.fragments[0].shadow.values.copy()
        start = time.perf_counter()
        encode_delta(codecs.Q4, backend.to_host(theta), shadow)        # what publish does (encode, shadow advanced), alone
        best["broadcast_encode"] = min(best["broadcast_encode"], time.perf_counter() - start)
    return best


def parse_sizes(text: str) -> list[int]:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return [int(float(v[:-1]) * scale[v[-1]]) if v[-1] in scale else int(v) for v in text.split(",")]


def row(n: int, kernels: str, threads: int, memcpy: float, b: dict[str, float]) -> float:
    """Print one line of the stage table; the critical path's seconds."""
    ingest_only = max(0.0, b["ingest"] - b["merge"] - b["broadcast_encode"])
    stages = dict(ingest=ingest_only, merge=b["merge"], broadcast_encode=b["broadcast_encode"],
                  snapshot=b["snapshot"], chunking=b["perform"])
    critical = b["ingest"] + b["perform"]              # intake to the last chunk out; the write runs beside it
    cells = " ".join(f"{stages[s] * 1e3:8.1f} ({stages[s] / memcpy:5.2f}x)" for s in STAGES)
    print(f"{n:>10} {4 * n / 2**20:>6.0f} {kernels:>36} {threads:>7} {memcpy * 1e3:>10.1f} {cells} {critical * 1e3:>11.1f} "
          f"{critical / memcpy:>15.2f} {b['in_path'] / memcpy:>14.2f} {b['cpu'] * 1e3:>9.1f}", flush=True)
    return critical


def run_size(n: int, args: argparse.Namespace, directory: Path) -> dict[str, float]:
    """Every (kernels, threads) of one size on one core; the ratios of the size, by name."""
    m, rng = args.learners, np.random.default_rng(0)
    core = new_core(n, m, rng)
    deltas = [codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3) for _ in range(m)]
    sink, critical, found = Sink(directory), {}, {}
    names = ["/".join([k] + ([g] if len(args.grams) > 1 else []) + ([f"spread-{p}"] if len(args.spreads) > 1 else [])
                      + ([f"copy-{c}"] if len(args.copies) > 1 else []) + ([f"norm-{q}"] if len(args.norms) > 1 else []))
             for k in args.kernels.split(",") for g in args.grams for p in args.spreads for c in args.copies
             for q in args.norms]
    configs = [(name, threads) for name in names for threads in args.thread_counts]
    bests: dict[tuple[str, int], dict[str, float]] = {}
    memcpy = float("inf")
    for _ in range(args.reps):             # interleaved: a load that changes during the run weighs on every config
        memcpy = min(memcpy, memcpy_seconds(n, m + 4, 1))
        for name, threads in configs:
            kernels, *rest = name.split("/")
            mode = next((r for r in rest if not r.startswith(("spread-", "copy-", "norm-"))), args.grams[0])
            spreading = next((r[len("spread-"):] for r in rest if r.startswith("spread-")), args.spreads[0])
            copying = next((r[len("copy-"):] for r in rest if r.startswith("copy-")), args.copies[0])
            norm = next((r[len("norm-"):] for r in rest if r.startswith("norm-")), args.norms[0])
            backend.use_kernels(kernels)
            backend.set_threads(threads)
            gram_at_merge(mode in ("at-merge", "kept"))
            keep_encoded(mode == "kept")
            spread_on(spreading == "on")
            copy_after_chunks(copying == "after")
            norm_after_broadcast(norm == "after-broadcast")
            frag = core.fragments[0]       # Θ's norm as this mode's last broadcast would have left it: the configs alternate
            frag.settle()
            if norm == "after-broadcast":
                frag.theta_norm().value()  # begun after the chunks, done while the snapshot was written
            else:
                frag.norm = None           # left to the round's first push
            b = run_config(core, deltas, 1, sink)
            bests[name, threads] = {k: min(v, bests.get((name, threads), b)[k]) for k, v in b.items()}
    for (kernels, threads), b in bests.items():
        critical[kernels, threads] = row(n, kernels, threads, memcpy, b)
        found.update(merge_logical_bytes_per_s_over_memcpy=(m + 4) * 4 * n / b["merge"] / (2 * (m + 4) * 4 * n / memcpy),
                     round_with_snapshot_in_path_wall_over_memcpy_wall=b["in_path"] / memcpy,
                     round_critical_path_wall_over_memcpy_wall=critical[kernels, threads] / memcpy)
    label = f"{n >> 20}M" if n >= 1 << 20 else str(n)
    for (name, threads), b in bests.items():            # a push's ingest per core: values over its CPU seconds
        tag = f"{label}_{threads}_threads" + (f"_{name}" if len(names) > 1 else "").replace("/", "_")
        for push in ("first", "later"):
            found[f"ingest_{push}_push_G_values_per_cpu_s_{tag}"] = n / b[f"{push}_cpu"] / 1e9
            found[f"ingest_{push}_push_G_values_per_wall_s_{tag}"] = n / b[f"{push}_wall"] / 1e9
    most, last = max(args.thread_counts), names[-1]
    if len(args.thread_counts) > 1:
        found[f"threads_speedup_{label}_1_to_{most}"] = critical[last, min(args.thread_counts)] / critical[last, most]
    for first, then in itertools.pairwise(names):       # e.g. separate over compiled: what the fused passes gave
        for threads in sorted(set(args.thread_counts)):
            found[f"{first}_over_{then}_critical_path_{label}_{threads}_threads".replace("/", "_")] = \
                critical[first, threads] / critical[then, threads]
            found[f"{first}_over_{then}_cpu_{label}_{threads}_threads".replace("/", "_")] = \
                bests[first, threads]["cpu"] / bests[then, threads]["cpu"]
    found[f"round_critical_path_wall_over_memcpy_wall_{label}"] = critical[last, most] / memcpy
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="1M,4M,16M", help="values per fragment, comma-separated (K, M and G suffixes)")
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default=str(backend.threads()), help="kernel threads, comma-separated (default: every core)")
    ap.add_argument("--kernels", default="compiled",
                    help="comma-separated: reference (NumPy), separate (numba, one pass each), compiled (numba, fused)")
    ap.add_argument("--gram", default="kept",
                    help="comma-separated: incremental (each push's Gram row folded as it is decoded), at-merge (one pass "
                         "over the f32 rows at the merge), kept (a q4 push's bytes kept, decoded inside the merge's Gram "
                         "pass and outer step: no f32 row written; the default); the last two with the compiled kernels only")
    ap.add_argument("--spread", default="on",
                    help="comma-separated: off (the broadcast's chunks, a kept push's copy and Θ's norm on the calling "
                         "thread, as before 2026-12-06), on (on the kernel threads: the default)")
    ap.add_argument("--norm", default="after-broadcast",
                    help="comma-separated: first-push (Θ's norm for admission taken by a version's first push, as before "
                         "2026-12-06), after-broadcast (begun on its own thread once the broadcast's chunks are out: the "
                         "default)")
    ap.add_argument("--copy", default="after",
                    help="comma-separated: beside (the snapshot's copy begun beside the broadcast's chunks, as before "
                         "2026-12-06), after (begun once they are out: the default)")
    args = ap.parse_args()
    args.grams = args.gram.split(",")
    args.spreads = args.spread.split(",")
    args.copies = args.copy.split(",")
    args.norms = args.norm.split(",")
    args.thread_counts = [int(t) for t in args.threads.split(",")]
    print(f"backend={backend.NAME}")
    print(f"one round of one fragment, {args.learners} learners, q4 up and down, snapshot fsynced by a thread after the "
          f"broadcast; best of {args.reps}")
    columns = " ".join(f"{s:>17}" for s in STAGES)
    print(f"{'values':>10} {'MiB':>6} {'kernels':>36} {'threads':>7} {'memcpy ms':>10} {columns} {'critical ms':>11} "
          f"{'critical/memcpy':>15} {'in-path/memcpy':>14} {'cpu ms':>9}")
    found: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="yeto-round-") as tmp:
        for n in parse_sizes(args.values):
            found.update(run_size(n, args, Path(tmp)))
    print("(each stage: ms, and in brackets its wall time over one memcpy of the round's (M + 4) rows, one thread; the "
          "snapshot column is the background write, off the critical path; cpu ms: the process's CPU time over the "
          "round, every thread's and the snapshot write's included, best of the rounds with the write beside)")
    last = found.pop("round_critical_path_wall_over_memcpy_wall")      # the last size's, last kernels, most threads
    for name, value in found.items():
        print(f"{name}={value:.3f}")
    print(f"round_critical_path_wall_over_memcpy_wall={last:.3f}")


if __name__ == "__main__":
    main()
