"""Activation checkpointing: each decoder layer's activations recomputed in the backward pass, when it is needed.

`recipe.activation_checkpointing` is "on", "off" or "auto". "auto" follows the planner's memory model
(schemas/memory_model.py, docs/MEMORY_MODEL.md), with the same activation formulas: on an accelerator,
checkpointing goes on when the activations of a step without it would take more than `SHARE` of the device
memory left once the training state is allocated; on the CPU it stays off (host RAM is rarely what runs out,
and recomputing costs about a third more compute per step).
"""
from __future__ import annotations

import torch

from yeto.learners import accel as accel_policy
from yeto.learners.lm_recipe import TrainRecipe

SHARE = 0.9                 # of the memory left: the rest is allocator slack (the memory model uses the same)
WORKING_SET = 34            # bytes per token and hidden unit of one layer's activations (Korthikanti et al. 2022)
_GRAD_AND_ADAM = 12         # bytes per trainable f32 parameter still to come: gradient 4, AdamW moments 8


def activation_bytes(*, tokens: int, hidden: int, layers: int, vocab: int, checkpointed: bool) -> float:
    """Activation memory of one micro-batch of `tokens` (the memory model's formula, in bytes)."""
    logits = tokens * vocab * 4 * 2                        # f32 logits and their gradient
    if checkpointed:                                       # one bf16 input per layer + one layer's working set
        return tokens * hidden * layers * 2 + tokens * hidden * WORKING_SET + logits
    return tokens * hidden * layers * WORKING_SET + logits


def wanted(model: torch.nn.Module, recipe: TrainRecipe, accel: accel_policy.Accel) -> bool:
    """Whether this rank checkpoints activations (call with the model loaded, tuned and on its device)."""
    if recipe.activation_checkpointing != "auto":
        return recipe.activation_checkpointing == "on"
    if not accel.is_accelerator:
        return False
    config = model.config
    need = activation_bytes(tokens=recipe.micro_batch * recipe.seq_len, hidden=config.hidden_size,
                            layers=config.num_hidden_layers, vocab=config.vocab_size, checkpointed=False)
    pending = sum(p.numel() for p in model.parameters() if p.requires_grad) * _GRAD_AND_ADAM
    return need > SHARE * max(0, accel_policy.free_memory_bytes(accel) - pending)


def apply(model: torch.nn.Module, on: bool) -> bool:
    """Turn checkpointing on (non-reentrant: frozen embeddings need no input gradients) or leave it off."""
    if on:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        enable = getattr(base, "activation_checkpointing_enable", None) or base.gradient_checkpointing_enable
        enable({"use_reentrant": False})
    return on


def is_on(model: torch.nn.Module) -> bool:
    """Whether any layer of `model` recomputes its activations (what tests and progress lines report)."""
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
