"""The inner learning-rate schedule, a pure function of the step, shared by every learner backend (no torch here)."""
from __future__ import annotations

import math

from yeto.learners.lm_recipe import TrainRecipe


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
