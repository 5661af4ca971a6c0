"""The MLX learner's inner loop: AdamW steps over accumulated micro-batches, the DiLoCo step boundary after each.

The same loss and normalisation as learners/torch/loop.py: the sum of next-token cross-entropies over labelled
tokens, divided by the island's labelled tokens of the step (so accumulation averages like one big batch), the
gradient norm clipped, the shared schedule (learners/schedule.py), AdamW with bias correction as torch's.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.schedule import lr_at
from yeto.learners.step import StepResult

IGNORE_INDEX = -100


def loss_sum(model: nn.Module, batch: dict[str, mx.array]) -> tuple[mx.array, mx.array]:
    """Sum of next-token cross-entropies over the labelled tokens (labels aligned with input_ids), and their count."""
    logits = model(batch["input_ids"], batch["position_ids"], batch["mask"])[:, :-1].astype(mx.float32)
    targets = batch["labels"][:, 1:]
    keep = targets != IGNORE_INDEX
    losses = nn.losses.cross_entropy(logits, mx.where(keep, targets, 0), reduction="none")
    return (losses * keep).sum(), keep.sum()


def evaluate(model: nn.Module, batches: list[dict[str, mx.array]]) -> float:
    """Mean cross-entropy per labelled token (nats per token)."""
    total, count = 0.0, 0
    for batch in batches:
        loss, n = loss_sum(model, batch)
        total, count = total + loss.item(), count + int(n.item())
    return total / max(1, count)


def train(model: nn.Module, batches: Iterator[dict[str, mx.array]], recipe: TrainRecipe, *,
          sync=None, on_step: Callable[[StepResult], None] | None = None, start_step: int = 0) -> list[StepResult]:
    """Train until `recipe.max_steps` (or the batches run out); `sync` is a SyncHook (learners/sync_hook.py)."""
    optimizer = optim.AdamW(learning_rate=lr_at(0, recipe), betas=list(recipe.betas), eps=1e-8,
                            weight_decay=recipe.weight_decay, bias_correction=True)
    grad_of = nn.value_and_grad(model, lambda m, b: loss_sum(m, b)[0])
    if sync is not None:
        sync.join()
    results = []
    for step in range(start_step, recipe.max_steps):
        started = time.perf_counter()
        micro = [b for _, b in zip(range(recipe.grad_accum), batches)]
        if len(micro) < recipe.grad_accum:
            break
        tokens = sum(int((b["labels"][:, 1:] != IGNORE_INDEX).sum().item()) for b in micro)
        total, grads = 0.0, None
        for batch in micro:
            loss, g = grad_of(model, batch)
            grads = g if grads is None else tree_map(mx.add, grads, g)
            total += loss.item()
        scale = 1.0 / max(1, tokens)
        grads = tree_map(lambda g, s=scale: g * s, grads)
        if recipe.clip_norm > 0:      # MLX's clip_grad_norm returns the norm before clipping too
            grads, norm = optim.clip_grad_norm(grads, recipe.clip_norm)
        else:                         # nothing clipped; the norm for the step's metrics
            norm = mx.sqrt(sum(mx.sum(g * g) for _, g in tree_flatten(grads)))
        lr = lr_at(step, recipe, resumed_at=start_step)
        optimizer.learning_rate = lr
        optimizer.update(model, grads)
        mx.eval(model.parameters(), optimizer.state)
        changed = bool(sync.after_step(step + 1, tokens)) if sync is not None else False
        result = StepResult(step=step + 1, loss=total / max(1, tokens), tokens=tokens,
                            seconds=time.perf_counter() - started, lr=lr, synced=changed, grad_norm=float(norm))
        results.append(result)
        if on_step is not None:
            on_step(result)
    return results
