"""A LaunchRun's recipe against the memory model (schemas/memory_model.py), beside the hard caps of
schemas/recipe_bounds.py: an island whose memory cannot hold the run is refused before it starts, with the numbers and
what to change (pure; this machine's memory, its CUDA devices' free memory and the model's size are bound in by
wiring.py).

- A local CPU island: the need against this machine's memory. The model is an estimate and a CPU island can swap, so
  only a need over FAR times the memory is refused.
- A local CUDA island: the need per GPU against the least free memory of this machine's CUDA devices
  (torch.cuda.mem_get_info, read in a child process by cuda_memory.py; None when no GPU is there: not checked).
- A cloud GPU island: the need per GPU on its nodes x count GPUs against the GPU table's memory of its accelerator
  (schemas/gpu_table.py), as `yeto launch` checks it, lora_r included.
GPUs have no swap: `fits` decides them as the learner will run it (activation checkpointing under auto).
Not checked: Ascend NPU islands (no memory table), GPUs outside the table, models of unknown size.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from yeto.schemas.gpu_table import GPUS
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.memory_model import Need, Workload, fits, per_gpu_need

FAR = 2.0
LOWER = "lower --seq-len, --micro-batch or --lora-r"


def over_memory(fleet: Sequence[dict[str, Any]], recipe: LaunchRecipe, *, weights_gb: float | None,
                host_memory_gb: float, cuda_memory_gb: float | None = None) -> str | None:
    """Why the run cannot train on the first island whose memory cannot hold it, with the numbers; None when every
    island may (or the model's size is unknown)."""
    if not weights_gb or weights_gb <= 0:
        return None
    t = recipe.train
    w = Workload(weights_gb=weights_gb, tuning=t.tuning, base_quantization=t.base_quantization, seq_len=t.seq_len,
                 micro_batch=t.micro_batch, lora_r=t.lora_r, activation_checkpointing=t.activation_checkpointing,
                 shard=t.shard)
    for i, spec in enumerate(fleet):
        if (why := _island(i, spec, w, host_memory_gb, cuda_memory_gb)) is not None:
            return why
    return None


def _island(i: int, spec: dict[str, Any], w: Workload, host_memory_gb: float, cuda_memory_gb: float | None) -> str | None:
    cloud, gpu, count = spec.get("cloud"), str(spec.get("gpu", "")), int(spec.get("count", 1))
    if cloud == "local" and gpu == "cpu":
        need = per_gpu_need(w, 1)   # the least it can take: activations checkpointed unless the recipe turns that off
        if host_memory_gb <= 0 or need.total_gb <= FAR * host_memory_gb:
            return None
        return (f"island {i} (local:1xcpu) would need {_words(need, w)}, over {FAR:.0f} x the {host_memory_gb:.1f} GB "
                f"this machine holds (docs/MEMORY_MODEL.md): {LOWER}")
    if cloud == "local" and gpu == "cuda":
        if cuda_memory_gb is None or cuda_memory_gb <= 0:
            return None
        ok, need = fits(w, count, cuda_memory_gb)
        return None if ok else (
            f"island {i} (local:{count}xcuda) would need {_words(need, w)} per GPU on {count} GPU(s), more than the "
            f"{cuda_memory_gb:.1f} GB free on this machine's fullest CUDA device (docs/MEMORY_MODEL.md): {LOWER}, "
            f"use --base-quantization nf4, or free the GPU")
    if cloud != "local" and gpu in GPUS:
        num_gpus = int(spec.get("nodes", 1)) * count
        ok, need = fits(w, num_gpus, GPUS[gpu].memory_gb)
        return None if ok else (
            f"island {i} ({cloud}:{count}x{gpu.lower()}) would need {_words(need, w)} per GPU on {num_gpus} GPU(s), "
            f"more than a {gpu} holds ({GPUS[gpu].memory_gb:.0f} GB, docs/MEMORY_MODEL.md): {LOWER}, add GPUs or "
            f"nodes, or use --base-quantization nf4")
    return None


def _words(need: Need, w: Workload) -> str:
    return (f"{need.total_gb:,.1f} GB ({need.state_gb:,.1f} GB of model state at lora_r {w.lora_r} and tuning "
            f"{w.tuning}, {need.activations_gb:,.1f} GB of activations at seq_len {w.seq_len} x micro_batch "
            f"{w.micro_batch})")
