"""FSDP2 against DDP inside one island: tokens/s of two gloo ranks on the CPU, same model, batch and steps, one run.

Each arm starts two rank processes with the torchrun environment, as the local backend does, builds the learner
(learners/torch/build.py: `shard` ddp or fsdp) and trains `--steps` steps with no sync on random tokens (throughput
does not depend on them); the first `--warmup` steps are left out. Arms alternate over `--reps` so a noisy machine
disturbs them alike, and the best repetition is kept. A report, with no target: on two CPU ranks FSDP2's gathers
and reduce-scatters cost what DDP's one all-reduce does not, and the memory it saves is what matters on GPUs.

    .venv/bin/python benchmarks/fsdp.py [--steps 12] [--layers 4] [--hidden 256] [--tuning full,lora] [--reps 2]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from lib_task import write_tiny_model

SEQ_LEN, GLOBAL_BATCH = 128, 4


def child(out: str, model_dir: str, shard: str, tuning: str, steps: int, warmup: int) -> None:
    import torch

    from yeto.learners.torch.api import TrainRecipe, build, dist, resolve_accel, train

    torch.set_num_threads(1)
    topology = dist.Topology.from_env()
    recipe = TrainRecipe(model=model_dir, tuning=tuning, lr=1e-3, warmup_steps=0, max_steps=steps, seq_len=SEQ_LEN,
                         micro_batch=GLOBAL_BATCH // topology.world_size, seed=0, shard=shard)
    accel = resolve_accel(recipe, local_rank=topology.local_rank, prefer="cpu")
    dist.init(topology, accel)
    built = build(recipe, accel=accel, topology=topology)
    vocab = built.model.config.vocab_size
    generator = torch.Generator().manual_seed(topology.rank)

    def batches():
        while True:
            ids = torch.randint(4, vocab, (recipe.micro_batch, SEQ_LEN), generator=generator)
            yield {"input_ids": ids, "labels": ids.clone()}

    results = train(built.model, batches(), recipe, accel=accel, topology=topology, wrapped=built.wrapped)
    if topology.rank == 0:
        timed = results[warmup:]
        Path(out).write_text(json.dumps({"tokens": sum(r.tokens for r in timed), "seconds": sum(r.seconds for r in timed),
                                         "sharded": built.sharded}))
    dist.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def island(model_dir: Path, shard: str, tuning: str, steps: int, warmup: int, out: Path) -> dict:
    port, procs = free_port(), []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", str(out), str(model_dir), shard, tuning,
                                       str(steps), str(warmup)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    for proc in procs:
        output, _ = proc.communicate(timeout=1800)
        if proc.returncode:
            raise SystemExit(f"{shard}/{tuning} rank exited {proc.returncode}:\n{output[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        out, model_dir, shard, tuning, steps, warmup = sys.argv[2:]
        return child(out, model_dir, shard, tuning, int(steps), int(warmup))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--tuning", default="full,lora")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="yeto-fsdp-") as tmp:
        model_dir = write_tiny_model(Path(tmp) / "model", layers=args.layers, hidden=args.hidden)
        print(f"two gloo ranks on the CPU, Llama {args.layers}x{args.hidden}, seq {SEQ_LEN}, global batch {GLOBAL_BATCH}, "
              f"{args.steps} steps ({args.warmup} left out), best of {args.reps}")
        for tuning in args.tuning.split(","):
            best = {}
            for _ in range(args.reps):
                for shard in ("ddp", "fsdp"):
                    got = island(model_dir, shard, tuning, args.steps, args.warmup, Path(tmp) / f"{shard}.json")
                    assert got["sharded"] == (shard == "fsdp"), got
                    best[shard] = max(best.get(shard, 0.0), got["tokens"] / got["seconds"])
            print(f"{tuning:>5}: ddp {best['ddp']:8.0f} tok/s  fsdp {best['fsdp']:8.0f} tok/s")
            print(f"fsdp_over_ddp_tokens_per_s_{tuning}={best['fsdp'] / best['ddp']:.3f}")


if __name__ == "__main__":
    main()
