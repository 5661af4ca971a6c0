"""One rank of the FSDP2-vs-DDP island test, started like torchrun starts ranks. The island trains with sync on:
rank 0 runs the sync hook against the real SyncerCore in its own process (an in-process wire); with FSDP2 the
other rank serves its gathers and scatters. The ranks train each tuning of argv[4] (comma-separated) one after the
other in one process group (one start-up for all); rank 0 writes each one's losses and final globals to
<argv[1]>-<tuning>.json."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import learner_loopback
import learner_tiny
import yeto.learners.torch.build as build_module
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch import dist, shards
from yeto.learners.torch.build import build, resolve_accel
from yeto.learners.torch.hook import make_hook
from yeto.learners.torch.loop import train
from yeto.learners.torch.tuning import trainable_parameters
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.core import SyncerCore

GLOBAL_BATCH = 4
SYNC = SyncConfig(num_fragments=2, inner_steps=3, quorum=1, grace_max_s=0.5, codec_up="f32", codec_down="f32")


def main(out: str, model_dir: str, shard: str, tunings: str) -> None:
    torch.set_num_threads(1)
    topology = dist.Topology.from_env()
    recipes = [TrainRecipe(model=model_dir, tuning=tuning, lr=3e-3, warmup_steps=2, max_steps=12, seq_len=32,
                           micro_batch=GLOBAL_BATCH // topology.world_size, seed=2, shard=shard, sync=SYNC.to_dict())
               for tuning in tunings.split(",")]
    accel = resolve_accel(recipes[0], local_rank=topology.local_rank, prefer="cpu")
    dist.init(topology, accel)
    for recipe in recipes:
        island(f"{out}-{recipe.tuning}.json", recipe, shard, accel, topology)
    dist.shutdown()


def island(out: str, recipe: TrainRecipe, shard: str, accel, topology: dist.Topology) -> None:
    loads = []          # low-memory loading: under FSDP2 only rank 0 reads the weights
    real_load = build_module.load_model
    build_module.load_model = lambda *a, **k: loads.append(1) or real_load(*a, **k)
    built = build(recipe, accel=accel, topology=topology)
    build_module.load_model = real_load
    Path(f"{out}.rank{topology.rank}").write_text(str(len(loads)))
    assert built.sharded == (shard == "fsdp")
    params = trainable_parameters(built.model)
    assert shards.is_sharded(params) == built.sharded
    wire = learner_loopback.Loopback(SyncerCore(SYNC, run_id="r-f")) if topology.rank == 0 else None
    hook = shards.on_rank0(lambda: make_hook(built.model, recipe, wire.transport("l0"), run_id="r-f", learner="l0",
                                             generation=0, join_wait_s=5.0), params, rank=topology.rank,
                           sharded=built.sharded)
    share = recipe.micro_batch
    batches = ({k: v[topology.rank * share:(topology.rank + 1) * share] for k, v in b.items()}
               for b in learner_tiny.packed_batches(built.tokenizer, learner_tiny.chat_rows(50), seq_len=32,
                                                    micro_batch=GLOBAL_BATCH))
    results = train(built.model, batches, recipe, accel=accel, topology=topology, sync=hook, wrapped=built.wrapped)
    shards.on_rank0(hook and hook.close, params, rank=topology.rank, sharded=built.sharded)   # as the entry point
    if built.sharded:      # every rank's shard holds its part of the values rank 0 synced
        full = {n: p.full_tensor().detach() for n, p in params}
    if topology.rank == 0:
        values = full if built.sharded else {n: p.detach() for n, p in params}
        digest = hashlib.sha256(b"".join(values[n].to(torch.float32).numpy().tobytes() for n in sorted(values)))
        Path(out).write_text(json.dumps({
            "losses": [r.loss for r in results], "synced": [r.synced for r in results],
            "versions": dict(hook.sync.versions), "params": digest.hexdigest(),
            "merged": sum(type(e).__name__ == "RoundMerged" for e in wire.events)}))


if __name__ == "__main__":
    main(*sys.argv[1:])
