"""One rank of scripts/gpu_check.sh's megatron step: `torchrun --nproc-per-node N -m yeto.learners.megatron.check
DEVICE DISPATCHER WORK`. On a tiny Mixtral (written to WORK by rank 0's caller: learners/megatron/tiny.py) it
prints `check:` lines with the largest logit difference against transformers and the first and last loss of 30
steps, and exits 1 past the thresholds: logits within 1e-3 (fp32), the last loss under 0.7 of the first.

On CUDA it runs the paths the CPU refuses (NCCL, the all-to-all dispatcher's CUDA streams); GPU_CHECK_DRY runs it
on the CPU with gloo and the all-gather dispatcher, so the command itself is tested here."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

MAX_LOGIT_DIFF = 1e-3
MAX_LOSS_RATIO = 0.7


def main(device: str, dispatcher: str, work: str) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from yeto.learners.lm_recipe import TrainRecipe
    from yeto.learners.megatron.backend import MegatronBackend, Rank, train
    from yeto.learners.megatron.island import close_island, logits, open_island
    from yeto.learners.torch.tiny import chat_rows, packed_batches
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    model_dir = Path(work) / "tiny-moe"
    island = open_island(model_dir, rank=rank, world_size=world, device=device, dispatcher=dispatcher,
                         master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
                         master_port=int(os.environ.get("MASTER_PORT", 29500)))
    ids = torch.randint(4, 24, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours = logits(island, ids).float().cpu()
    diff = float((ours - AutoModelForCausalLM.from_pretrained(model_dir)(ids).logits).abs().max())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    recipe = TrainRecipe(model=str(model_dir), tuning="full", lr=3e-3, warmup_steps=2, max_steps=30, seq_len=32,
                         micro_batch=2, grad_accum=1, seed=2)
    stream = packed_batches(tokenizer, chat_rows(50), seq_len=32, micro_batch=2, seed=rank)
    this = Rank(island, tokenizer)
    results = train(this, stream, recipe, sync=None, on_step=None, start_step=0,
                    boundary=lambda call: bool(MegatronBackend().on_rank0(this, call if rank == 0 else None)))
    close_island()
    first, last = results[0].loss, results[-1].loss
    ok = diff <= MAX_LOGIT_DIFF and last < MAX_LOSS_RATIO * first
    if rank == 0:
        print(f"check: megatron device={device} dispatcher={dispatcher} ep={world} logit_diff={diff:.2e} "
              f"loss(first, last)={first:.3f} {last:.3f} {'ok' if ok else 'over threshold'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
