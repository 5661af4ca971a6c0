"""A LaunchRun's recipe against the memory model (schemas/memory_model.py), beside the hard caps of
schemas/recipe_bounds.py: a local CPU island whose need is far above this machine's memory is refused before it starts
(pure; the machine's memory and the model's size are bound in by wiring.py).

Only local CPU islands are checked here: a cloud island's GPU is checked by `yeto launch` against the planner's GPU
table before anything is rented, and a local CUDA island's memory is known only once torch is imported.
FAR: the model is an estimate, so only a need over twice what the machine holds is refused.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.memory_model import Workload, per_gpu_need

FAR = 2.0


def over_memory(fleet: Sequence[dict[str, Any]], recipe: LaunchRecipe, *, weights_gb: float | None,
                host_memory_gb: float) -> str | None:
    """Why the run cannot train on this machine's CPU islands, with the numbers; None when it may (or the model's size
    is unknown)."""
    cpu = [i for i, spec in enumerate(fleet) if spec.get("cloud") == "local" and spec.get("gpu") == "cpu"]
    if not cpu or not weights_gb or weights_gb <= 0 or host_memory_gb <= 0:
        return None
    t = recipe.train
    w = Workload(weights_gb=weights_gb, tuning=t.tuning, base_quantization=t.base_quantization, seq_len=t.seq_len,
                 micro_batch=t.micro_batch, lora_r=t.lora_r, activation_checkpointing=t.activation_checkpointing,
                 shard=t.shard)
    need = per_gpu_need(w, 1)       # the least it can take: activations checkpointed unless the recipe turns that off
    if need.total_gb <= FAR * host_memory_gb:
        return None
    return (f"island {cpu[0]} (local:1xcpu) would need {need.total_gb:,.1f} GB ({need.state_gb:,.1f} GB of model state "
            f"at lora_r {t.lora_r} and tuning {t.tuning}, {need.activations_gb:,.1f} GB of activations at seq_len "
            f"{t.seq_len} x micro_batch {t.micro_batch}), over {FAR:.0f} x the {host_memory_gb:.1f} GB this machine "
            f"holds (docs/MEMORY_MODEL.md): lower --seq-len, --micro-batch or --lora-r")
