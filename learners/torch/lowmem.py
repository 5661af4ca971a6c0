"""Low-memory loading for FSDP2 islands: rank 0 alone reads the weights; the other ranks build the model on the
meta device (no memory), shard it, and receive their shards from rank 0 (`broadcast_from_rank0`).

Peak host memory is then one full model on rank 0 and one shard elsewhere, instead of one full model on every
rank. Every rank first builds the meta skeleton (the config alone) to decide whether the island shards at all.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.model import ModelSource, load_config
from yeto.learners.torch.tuning import apply_tuning


def skeleton(source: ModelSource, recipe: TrainRecipe, *, dtype: torch.dtype) -> torch.nn.Module:
    """The tuned model on the meta device: every shape and name, no storage."""
    from transformers import AutoModelForCausalLM
    config = load_config(source)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.config.use_cache = False
    return apply_tuning(model, recipe)


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Rank 0's whole values, taken before FSDP2 shards the module (references, not copies)."""
    return dict(model.state_dict())


def materialize(model: torch.nn.Module, state: dict[str, torch.Tensor] | None, device: torch.device) -> None:
    """After `fully_shard`: allocate the other ranks' shards and fill every rank's from rank 0's `state`;
    buffers (rotary tables, not in a state dict when non-persistent) are broadcast whole."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    if state is None:
        model.to_empty(device=device)
    set_model_state_dict(model, state or {}, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    with torch.no_grad():
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)
