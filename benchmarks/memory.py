"""Peak RSS of a syncer process against the syncer memory model (schemas/syncer_memory.py), over a ladder of sizes.

Each size runs in a fresh process: a real SyncerCore takes in island 0's f32 init of every fragment (the others adopt
version 0: learners/sync_hook.py) and `--rounds` rounds of q4 pushes, in chunks as the data plane fetches them. Every
message's chunks are held until its fragment's round merges (as held.py does), every snapshot is written
(snapshot.py) and every broadcast chunked (outputs.py). Each round opens every fragment's round before closing any
(all learners but the last push every fragment first): the model's worst case. The process's peak RSS (VmHWM)
is compared with the model's prediction for one process.

    .venv/bin/python benchmarks/memory.py [--sizes 1,8,32,135] (millions of values) [--learners 2] [--fragments 8]

prints one line per size, then memory_model_error=<max relative error over the ladder> (target <= 0.2).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from lib_memory_ranks import peak_rss

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import CHUNK_BYTES
from yeto.schemas.syncer_memory import syncer_memory
from yeto.schemas.training import RoundMerged
from yeto.services.syncer.api import Broadcast, SaveSnapshot, SyncerCore, write_snapshot

FP = "7" * 64


def messages(learner: str, p: int, kind: str, values: np.ndarray, **fields) -> list[tuple[FragmentHeader, bytes]]:
    codec = "f32" if kind == "init" else "q4"
    payload = codecs.codec(codec).encode(values)
    header = FragmentHeader(run_id="mem", learner=learner, fragment=p, kind=kind, role="layers", fingerprint=FP,
                            codec=codec, numel=values.size, sha256=sha256(payload), **fields)
    return split_chunks(header, payload, CHUNK_BYTES)


def drive(trainable: int, num_learners: int, config: SyncConfig, rounds: int, directory: Path) -> None:
    """The data plane's work for one run, without the bus: chunks in, held until merged, outputs performed."""
    core, now = SyncerCore(config, run_id="mem", clock=lambda: 0.0), 0.0
    numel = -(-trainable // config.num_fragments)
    held: dict[int, list[bytes]] = {}
    rng = np.random.default_rng(0)

    def take(learner: str, p: int, kind: str, values: np.ndarray, **fields) -> None:
        for h, chunk in messages(learner, p, kind, values, **fields):
            outputs = core.receive(h, chunk, now, sender=learner)
            held.setdefault(p, []).append(chunk)
            for out in outputs:
                if isinstance(out, SaveSnapshot):
                    write_snapshot(directory, out.snapshot)
                elif isinstance(out, Broadcast):
                    split_chunks(out.header, out.payload, CHUNK_BYTES)
                elif isinstance(out, RoundMerged):
                    held.pop(out.fragment, None)

    learners = [f"l{m}" for m in range(num_learners)]
    for p in range(config.num_fragments):      # island 0 sends the init; the others adopt version 0 (sync_hook.py)
        take(learners[0], p, "init", rng.standard_normal(numel, dtype=np.float32))
    for r in range(rounds):
        now += 1.0
        for learner in learners:       # every fragment's round open before the last learner closes them
            for p in range(config.num_fragments):
                d = rng.standard_normal(numel, dtype=np.float32) * np.float32(1e-3)
                take(learner, p, "push", d, local_step=r + 1, c_steps=1, c_tokens=100, tokens_to=100 * (r + 1),
                     base_version=core.fragments[p].version, step_time_s=0.1)
    assert all(f.version == rounds for f in core.fragments.values()), {p: f.version for p, f in core.fragments.items()}


def child(args) -> None:
    config = SyncConfig(num_fragments=args.fragments)
    with tempfile.TemporaryDirectory() as tmp:
        drive(args.child, args.learners, config, args.rounds, Path(tmp))
    print(json.dumps({"peak": peak_rss()}))


def measure(trainable: int, args) -> int:
    out = subprocess.run([sys.executable, __file__, "--child", str(trainable), "--learners", str(args.learners),
                          "--fragments", str(args.fragments), "--rounds", str(args.rounds)],
                         capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8,32,135", help="trainable values, in millions (135: SmolLM2-135M in full)")
    ap.add_argument("--learners", type=int, default=2)
    ap.add_argument("--fragments", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ranks", action="store_true", help="also each learner rank of lib_memory_ranks.LADDER (CPU)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return child(args)
    if args.ranks:
        import lib_memory_ranks
        lib_memory_ranks.report()
    errors = []
    for millions in (float(s) for s in args.sizes.split(",")):
        trainable = int(millions * 1e6)
        model = syncer_memory(trainable, num_learners=args.learners, config=SyncConfig(num_fragments=args.fragments))
        peak = measure(trainable, args)
        errors.append(abs(model.process - peak) / peak)
        print(f"syncer {millions:g}M trainable, {args.learners} learners, {args.fragments} fragments: peak RSS "
              f"{peak / 2**20:.0f} MiB, model {model.process / 2**20:.0f} MiB ({model.describe()}), error {errors[-1]:.3f}")
    print(f"memory_model_error={max(errors):.3f}")


if __name__ == "__main__":
    main()
