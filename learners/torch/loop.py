"""The inner training loop of one learner rank: AdamW steps over accumulated micro-batches, with the
DiLoCo step boundary on rank 0 and its applied global values broadcast to the island's other ranks."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from yeto.learners import accel as accel_policy
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.step import StepResult
from yeto.learners.torch import dist, shards
from yeto.learners.torch.evaluate import IGNORE_INDEX, loss_sum, to_device
from yeto.learners.torch.optim import build_optimizer, clip_gradients, lr_at, set_lr
from yeto.learners.torch.tuning import trainable_parameters


class SyncHook(Protocol):
    """The step boundary as the loop sees it (learners/sync_hook.py's DilocoHook is the one)."""

    def join(self) -> bool:
        """Join the run before the first step (apply its latest global versions); True if parameters changed."""

    def after_step(self, step: int, tokens: int) -> bool:
        """Apply newer globals and push due fragments after step `step`; True if parameters changed."""


def _labelled(batch: dict[str, torch.Tensor]) -> int:
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


_SINGLE_PROCESS = dist.Topology()  # the default topology: one process, rank 0 (frozen, so safe to share)


def train(model: torch.nn.Module, batches: Iterator[dict[str, torch.Tensor]], recipe: TrainRecipe, *,
          accel: accel_policy.Accel, topology: dist.Topology = _SINGLE_PROCESS, sync: SyncHook | None = None,
          on_step: Callable[[StepResult], None] | None = None, start_step: int = 0,
          wrapped: torch.nn.Module | None = None) -> list[StepResult]:
    """Train until `recipe.max_steps` (or the batches run out). `model` is the unwrapped module whose
    trainable parameters the sync hook reads and writes; `wrapped` is its DDP/FSDP2 wrapper, if any."""
    wrapped = wrapped or model
    params = trainable_parameters(model)
    optimizer = build_optimizer(params, recipe)
    is_sync_rank = topology.rank == 0 and sync is not None
    sharded = shards.is_sharded(params)     # FSDP2: the other ranks serve rank 0's gathers and scatters
    syncing = sharded and dist.all_reduce_sum([float(is_sync_rank)], accel)[0] > 0

    def boundary(call: Callable[[], bool]) -> bool:
        return bool(shards.on_rank0(call if is_sync_rank else None, params, rank=topology.rank, sharded=syncing))

    changed = boundary(lambda: sync.join())
    if dist.all_reduce_sum([float(changed)], accel)[0] and not sharded:   # shards were written in place
        dist.broadcast_parameters([p for _, p in params], accel)
    wrapped.train()
    results = []
    for step in range(start_step, recipe.max_steps):
        started = time.perf_counter()
        micro = [b for _, b in zip(range(recipe.grad_accum), batches)]
        if len(micro) < recipe.grad_accum:
            break
        # Normalise by the island's labelled tokens, not per micro-batch, so accumulation and DDP
        # average exactly like one big batch (DDP divides gradients by the world size).
        (island_tokens,) = dist.all_reduce_sum([float(sum(_labelled(b) for b in micro))], accel)
        scale = topology.world_size / max(1.0, island_tokens)
        lr = lr_at(step, recipe, resumed_at=start_step)
        set_lr(optimizer, lr)
        loss_total = torch.zeros((), dtype=torch.float64, device=accel.device)
        for i, batch in enumerate(micro):
            with dist.gradient_sync(wrapped, i == len(micro) - 1):
                with accel_policy.autocast(accel):
                    total, _ = loss_sum(wrapped, to_device(batch, accel.device))
                (total * scale).backward()
            loss_total += total.detach()
        grad_norm = clip_gradients(params, recipe.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        changed = boundary(lambda s=step + 1, t=int(island_tokens): sync.after_step(s, t))
        island_loss, num_changed = dist.all_reduce_sum([float(loss_total), float(changed)], accel)
        if num_changed and not sharded:
            dist.broadcast_parameters([p for _, p in params], accel)
        result = StepResult(step=step + 1, loss=island_loss / max(1.0, island_tokens), tokens=int(island_tokens),
                            seconds=time.perf_counter() - started, lr=lr, synced=bool(num_changed), grad_norm=grad_norm)
        results.append(result)
        if on_step is not None:
            on_step(result)
    return results
