"""One rank of a Megatron-Core island for tests/megatron/test_megatron_island.py: started once per rank with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and the island's tensor parallelism and tuning (argv: full, or lora with
adapters saved as the finalizer saves them and loaded with peft); rank 0 writes what it measured to the JSON file
given."""
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
from yeto.learners.megatron.lora import TARGETS, LoraSettings
from yeto.learners.torch.tiny import chat_rows, packed_batches

GLOBAL_BATCH = 4
LORA = LoraSettings(r=4, alpha=8, targets=TARGETS, seed=2)


def max_diff(island, hf, ids: torch.Tensor) -> float:
    """Megatron's logits (every rank computes them) against transformers' (rank 0), largest absolute difference."""
    with torch.no_grad():
        ours = logits(island, ids)
        return float((ours - hf(ids).logits).abs().max()) if hf is not None else 0.0


def save_adapter(arrays, model_dir: str, artifact: str) -> None:
    """Rank 0: the adapters read through `arrays`, written as services/finalizer/artifact.py writes an adapter."""
    from peft import LoraConfig
    from safetensors.numpy import save_file

    from yeto.services.finalizer.artifact import adapter_tensors, target_modules
    state = {name: arrays.read(name) for name in arrays.names()}
    LoraConfig(r=LORA.r, lora_alpha=LORA.alpha, target_modules=target_modules(state), bias="none",
               task_type="CAUSAL_LM", base_model_name_or_path=model_dir).save_pretrained(artifact)
    save_file(adapter_tensors(state), str(Path(artifact) / "adapter_model.safetensors"), metadata={"format": "pt"})


def load_artifact(model_dir: str, artifact: str, tuning: str):
    from transformers import AutoModelForCausalLM
    if tuning == "full":
        return AutoModelForCausalLM.from_pretrained(artifact)
    from peft import PeftModel
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), artifact)


def main(out: str, model_dir: str, artifact: str, tp: str = "1", tuning: str = "full") -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    island = open_island(Path(model_dir), rank=rank, world_size=world, master_addr=os.environ["MASTER_ADDR"],
                         master_port=int(os.environ["MASTER_PORT"]), tensor_parallel=int(tp),
                         lora=LORA if tuning == "lora" else None)
    replicas, replica = island.ep, island.layout.ep_rank      # the TP ranks of a replica see the same batch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_dir) if rank == 0 else None
    ids = torch.randint(4, 24, (2, 16), generator=torch.Generator().manual_seed(5))
    measured: dict = {"initial_diff": max_diff(island, hf, ids)}

    recipe = TrainRecipe(model=model_dir, tuning=tuning, lr=3e-3 if tuning == "full" else 2e-2, warmup_steps=2,
                         max_steps=6, seq_len=32,
                         micro_batch=GLOBAL_BATCH // replicas, grad_accum=1, seed=2)
    share = recipe.micro_batch
    stream = ({k: v[replica * share:(replica + 1) * share] for k, v in b.items()}
              for b in packed_batches(tokenizer, chat_rows(50), seq_len=32, micro_batch=GLOBAL_BATCH))
    backend, this = MegatronBackend(), Rank(island, tokenizer)
    results = train(this, stream, recipe, sync=None, on_step=None, start_step=0,
                    boundary=lambda call: bool(backend.on_rank0(this, call if rank == 0 else None)))
    measured["losses"] = [r.loss for r in results]

    # Rank 0 reads every tensor through the adapter (the other rank's experts by broadcast) into an artifact.
    save = (lambda: checkpoint.save(this.arrays, Path(model_dir), Path(artifact))) if tuning == "full" else \
        (lambda: save_adapter(this.arrays, model_dir, artifact))
    backend.on_rank0(this, save if rank == 0 else None)
    trained = load_artifact(model_dir, artifact, tuning) if rank == 0 else None
    measured["artifact_diff"] = max_diff(island, trained, ids)
    measured["trained_vs_base"] = max_diff(island, hf, ids)

    # Rank 0 writes the base's values back through the adapter (LoRA: B = 0): every rank keeps what it holds.
    def restore() -> None:
        from safetensors.torch import load_file
        if tuning == "lora":
            for name in this.arrays.names():
                if ".lora_B." in name:
                    this.arrays.write(name, torch.zeros(this.arrays.shape(name)).numpy())
            return
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
