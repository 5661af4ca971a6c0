"""The inner training loop of a diffusion learner: AdamW on the denoiser's LoRA tensors over accumulated
micro-batches, with the DiLoCo step boundary after each optimizer step (one rank per island)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch

from yeto.learners.diffusion import objective
from yeto.learners.diffusion.components import Built
from yeto.learners.diffusion.recipe import DiffusionRecipe
from yeto.learners.step import StepResult
from yeto.learners.torch.loop import SyncHook
from yeto.learners.torch.optim import build_optimizer, clip_gradients, lr_at, set_lr
from yeto.learners.torch.tuning import trainable_parameters


def noise_generator(recipe: DiffusionRecipe, shard: int) -> torch.Generator:
    """Timesteps and noise of one shard: seeded, so a run repeats exactly and islands draw differently."""
    return torch.Generator().manual_seed(recipe.seed * 1_000_003 + shard)


def train(built: Built, batches: Iterator[tuple[torch.Tensor, list[str]]], recipe: DiffusionRecipe, *,
          generator: torch.Generator, sync: SyncHook | None = None, on_step: Callable[[StepResult], None] | None = None,
          start_step: int = 0) -> list[StepResult]:
    """Train until `recipe.max_steps` (or the batches run out); a step's `tokens` are its images (the merge weight)."""
    params = trainable_parameters(built.model)
    optimizer = build_optimizer(params, recipe)
    if sync is not None:
        sync.join()
    built.model.train()
    results = []
    for step in range(start_step, recipe.max_steps):
        started = time.perf_counter()
        micro = [b for _, b in zip(range(recipe.grad_accum), batches)]
        if len(micro) < recipe.grad_accum:
            break
        images = sum(len(captions) for _, captions in micro)
        lr = lr_at(step, recipe, resumed_at=start_step)
        set_lr(optimizer, lr)
        loss_total = 0.0
        for pixels, captions in micro:        # weighted by images, so accumulation averages like one big batch
            loss = objective.loss(built, pixels, captions, generator)
            (loss * len(captions) / images).backward()
            loss_total += float(loss.detach()) * len(captions)
        grad_norm = clip_gradients(params, recipe.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        changed = sync.after_step(step + 1, images) if sync is not None else False
        result = StepResult(step=step + 1, loss=loss_total / images, tokens=images,
                            seconds=time.perf_counter() - started, lr=lr, synced=bool(changed), grad_norm=grad_norm)
        results.append(result)
        if on_step is not None:
            on_step(result)
    return results
