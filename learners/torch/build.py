"""Build one learner rank: model and tokenizer loaded, tuning applied on the CPU, moved and wrapped."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from yeto.infra.source_pins import check_data_pin, pinned_source
from yeto.learners import accel as accel_policy
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch import checkpointing, dist, lowmem, quant
from yeto.learners.torch.model import load_model, load_tokenizer
from yeto.learners.torch.tuning import apply_tuning

_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


@dataclass(frozen=True, kw_only=True)
class Built:
    """A learner rank ready to train."""

    model: torch.nn.Module
    """The unwrapped (peft) module: the sync adapter reads its trainable parameters."""
    wrapped: torch.nn.Module
    """What the loop calls: `model` itself, or its DDP / FSDP2 wrapper."""
    tokenizer: object
    """The model's tokenizer, chat template included."""
    accel: accel_policy.Accel
    """The hardware policy in force."""
    sharded: bool
    """True when FSDP2 shards the model across the island's ranks."""
    checkpointed: bool = False
    """True when decoder layers recompute their activations in the backward pass."""


def resolve_accel(recipe: TrainRecipe, *, local_rank: int, prefer: str | None = None) -> accel_policy.Accel:
    """The hardware policy, with the recipe's dtype overriding the automatic choice."""
    accel = accel_policy.detect(local_rank=local_rank, prefer=prefer)
    if recipe.dtype == "auto":
        return accel
    return accel_policy.Accel(kind=accel.kind, device=accel.device, dist_backend=accel.dist_backend,
                              compute_dtype=_DTYPES[recipe.dtype])


def build(recipe: TrainRecipe, *, accel: accel_policy.Accel, topology: dist.Topology) -> Built:
    # What was loaded is what the run pinned: a differing base or data file refuses to train (ValueError: exit 2).
    source = pinned_source(recipe.model, recipe.pins.get("base"))
    check_data_pin(recipe.data, recipe.pins.get("data"))
    tokenizer = load_tokenizer(source)
    nf4 = recipe.base_quantization == "nf4"      # QLoRA: quantized while loading, onto this rank's device
    dtype = accel_policy.weight_dtype(accel, tuning=recipe.tuning)
    model = lowmem.skeleton(source, recipe, dtype=dtype) if topology.distributed and not nf4 else None
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) if model is not None else 0
    # --shard: fsdp shards any island of several ranks; auto only where one replica does not fit (accel.py).
    sharded = model is not None and (recipe.shard == "fsdp" or recipe.shard == "auto" and (
        accel_policy.needs_sharding(accel, param_bytes=param_bytes, tuning=recipe.tuning, world_size=topology.world_size)))
    if not sharded or topology.rank == 0:   # FSDP2: rank 0 alone reads the weights (lowmem.py)
        model = load_model(source, dtype=dtype, quantization=quant.nf4_config(accel) if nf4 else None,
                           device_map=quant.device_map(accel) if nf4 else None)
        model = apply_tuning(model, recipe)   # on the CPU, from the shared seed: identical on every island
    state = lowmem.full_state(model) if sharded and topology.rank == 0 else None
    if not sharded and not nf4:
        model = model.to(accel.device)
    checkpointed = checkpointing.apply(model, checkpointing.wanted(model, recipe, accel))   # before FSDP2 wraps layers
    wrapped = dist.wrap(model, accel, topology, shard=sharded)
    if sharded:
        lowmem.materialize(model, state, accel.device)
        del state
    accel_policy.empty_cache(accel)
    return Built(model=model, wrapped=wrapped, tokenizer=tokenizer, accel=accel, sharded=sharded,
                 checkpointed=checkpointed)
