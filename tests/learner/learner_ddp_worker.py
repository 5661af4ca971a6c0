"""One rank of the DDP equivalence test, started like torchrun starts ranks (RANK, WORLD_SIZE, ... in
the environment). Every rank takes its slice of the same global batches; losses go to argv[1] as JSON."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch import dist
from yeto.learners.torch.build import build, resolve_accel
from yeto.learners.torch.loop import train

GLOBAL_BATCH = 4


def main(out: str, model_dir: str) -> None:
    torch.set_num_threads(1)
    topology = dist.Topology.from_env()
    recipe = TrainRecipe(model=model_dir, tuning="full", lr=3e-3, warmup_steps=2, max_steps=6, seq_len=32,
                         micro_batch=GLOBAL_BATCH // topology.world_size, grad_accum=1, seed=2)
    accel = resolve_accel(recipe, local_rank=topology.local_rank, prefer="cpu")
    dist.init(topology, accel)
    built = build(recipe, accel=accel, topology=topology)
    share = recipe.micro_batch
    batches = ({k: v[topology.rank * share:(topology.rank + 1) * share] for k, v in b.items()}
               for b in learner_tiny.packed_batches(built.tokenizer, learner_tiny.chat_rows(50), seq_len=32,
                                                    micro_batch=GLOBAL_BATCH))
    results = train(built.model, batches, recipe, accel=accel, topology=topology, wrapped=built.wrapped)
    if topology.rank == 0:
        Path(out).write_text(json.dumps([r.loss for r in results]))
    dist.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
