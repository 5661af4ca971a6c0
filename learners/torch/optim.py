"""The inner optimizer: AdamW and its learning-rate schedule, a pure function of the step."""
from __future__ import annotations

import torch

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.schedule import lr_at  # torch-free: the MLX learner shares it

__all__ = ["build_optimizer", "lr_at", "set_lr"]


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
