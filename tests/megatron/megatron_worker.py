"""One rank of a Megatron-Core island for tests/megatron/test_megatron_island.py: started once per rank with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and the island's tensor parallelism (argv); rank 0 writes what it
measured to the JSON file given."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.megatron import checkpoint
from yeto.learners.megatron.backend import MegatronBackend, Rank, train
from yeto.learners.megatron.island import close_island, logits, open_island
from yeto.learners.torch.tiny import chat_rows, packed_batches

GLOBAL_BATCH = 4


def max_diff(island, hf, ids: torch.Tensor) -> float:
    """Megatron's logits (every rank computes them) against transformers' (rank 0), largest absolute difference."""
    with torch.no_grad():
        ours = logits(island, ids)
        return float((ours - hf(ids).logits).abs().max()) if hf is not None else 0.0


def main(out: str, model_dir: str, artifact: str, tp: str = "1") -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    island = open_island(Path(model_dir), rank=rank, world_size=world, master_addr=os.environ["MASTER_ADDR"],
                         master_port=int(os.environ["MASTER_PORT"]), tensor_parallel=int(tp))
    replicas, replica = island.ep, island.layout.ep_rank      # the TP ranks of a replica see the same batch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_dir) if rank == 0 else None
    ids = torch.randint(4, 24, (2, 16), generator=torch.Generator().manual_seed(5))
    measured: dict = {"initial_diff": max_diff(island, hf, ids)}

    recipe = TrainRecipe(model=model_dir, tuning="full", lr=3e-3, warmup_steps=2, max_steps=6, seq_len=32,
                         micro_batch=GLOBAL_BATCH // replicas, grad_accum=1, seed=2)
    share = recipe.micro_batch
    stream = ({k: v[replica * share:(replica + 1) * share] for k, v in b.items()}
              for b in packed_batches(tokenizer, chat_rows(50), seq_len=32, micro_batch=GLOBAL_BATCH))
    backend, this = MegatronBackend(), Rank(island, tokenizer)
    results = train(this, stream, recipe, sync=None, on_step=None, start_step=0,
                    boundary=lambda call: bool(backend.on_rank0(this, call if rank == 0 else None)))
    measured["losses"] = [r.loss for r in results]

    # Rank 0 reads every tensor through the adapter (the other rank's experts by broadcast) into an artifact.
    backend.on_rank0(this, lambda: checkpoint.save(this.arrays, Path(model_dir), Path(artifact)))
    trained = AutoModelForCausalLM.from_pretrained(artifact) if rank == 0 else None
    measured["artifact_diff"] = max_diff(island, trained, ids)
    measured["trained_vs_base"] = max_diff(island, hf, ids)

    # Rank 0 writes the base's values back through the adapter: every rank keeps what it holds.
    def restore() -> None:
        from safetensors.torch import load_file
        for name, value in load_file(str(Path(model_dir) / "model.safetensors")).items():
            this.arrays.write(name, value.float().numpy())
    backend.on_rank0(this, restore if rank == 0 else None)
    measured["restored_diff"] = max_diff(island, hf, ids)
    measured["names"] = this.arrays.names()
    close_island()
    if rank == 0:
        Path(out).write_text(json.dumps(measured))


if __name__ == "__main__":
    main(*sys.argv[1:])
