"""The inner optimizer: AdamW and its learning-rate schedule, a pure function of the step."""
from __future__ import annotations

import math

import torch

from yeto.learners.torch.recipe import TrainRecipe


def lr_at(step: int, recipe: TrainRecipe, *, resumed_at: int = 0) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warmup, then cosine or linear to the floor, or constant.
    A replacement resumed at `resumed_at` > 0 starts a fresh AdamW (no moments): it warms up again over
    `warmup_steps`, scaling the schedule's rate from 1/warmup_steps up to 1, instead of taking full-size
    sign-like first steps at the resumed rate."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    rewarm = min(1.0, (step - resumed_at + 1) / recipe.warmup_steps) if resumed_at > 0 and recipe.warmup_steps else 1.0
    if recipe.schedule == "constant":
        return recipe.lr * rewarm
    decay_steps = max(1, recipe.max_steps - recipe.warmup_steps)
    progress = min(1.0, (step - recipe.warmup_steps) / decay_steps)
    floor = recipe.min_lr_ratio * recipe.lr
    if recipe.schedule == "linear":
        return rewarm * (recipe.lr - (recipe.lr - floor) * progress)
    return rewarm * (floor + (recipe.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


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
