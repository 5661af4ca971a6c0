"""The inner optimizer: AdamW, its learning-rate schedule (a pure function of the step) and gradient clipping."""
from __future__ import annotations

import math

import torch

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.schedule import lr_at  # torch-free: the MLX learner shares it

__all__ = ["build_optimizer", "clip_gradients", "lr_at", "set_lr"]


def build_optimizer(params: list[tuple[str, torch.nn.Parameter]], recipe: TrainRecipe) -> torch.optim.AdamW:
    """AdamW over (name, parameter) pairs; norms and biases (1-D) are not decayed."""
    decay = [p for _, p in params if p.ndim >= 2]
    no_decay = [p for _, p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    # foreach is the fast path on CPU and GPU alike; fused only exists for accelerators.
    return torch.optim.AdamW(groups, lr=lr_at(0, recipe), betas=recipe.betas, foreach=True)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def clip_gradients(params: list[tuple[str, torch.nn.Parameter]], max_norm: float) -> float:
    """Clip the gradients' total norm to `max_norm` (none when it is 0) and return the norm before clipping, for
    the step's metrics. Every rank calls it: under FSDP2 the norm is a collective over the shards."""
    norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], max_norm if max_norm > 0 else math.inf)
    full = getattr(norm, "full_tensor", None)     # a DTensor under FSDP2
    return float(full() if full is not None else norm)
