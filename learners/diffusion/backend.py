"""The diffusion backend of learners/shell.py: LoRA on a Diffusers denoiser (PyTorch), one process per island.
The denoiser's LoRA tensors go through the same sync hook as a causal LM's (learners/torch/adapter.py)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from yeto.learners import accel as accel_policy
from yeto.learners.diffusion import media, objective
from yeto.learners.diffusion.components import Built, build
from yeto.learners.diffusion.loop import noise_generator, train
from yeto.learners.diffusion.recipe import DiffusionRecipe
from yeto.learners.diloco_sync import ArrayAdapter
from yeto.learners.shell import OneRank
from yeto.learners.step import StepResult
from yeto.learners.sync_hook import DilocoHook
from yeto.learners.torch.build import resolve_accel
from yeto.learners.torch.hook import parameter_counts, torch_arrays
from yeto.schemas.learner_contract import BACKENDS, LearnerArgs


@dataclass(frozen=True)
class Island:
    """The built pipeline, this island's shard and its split of the images."""

    built: Built
    shard: int
    train_items: list[media.MediaItem]
    heldout_items: list[media.MediaItem]


class DiffusionBackend(OneRank):
    info = BACKENDS["diffusion"]
    devices: tuple[str, ...] | None = accel_policy.KINDS

    def load_recipe(self, text: str) -> DiffusionRecipe:
        return DiffusionRecipe.from_json(text)

    def build(self, recipe: DiffusionRecipe, args: LearnerArgs) -> Island:
        accel = resolve_accel(recipe, local_rank=args.local_rank or 0, prefer=args.device)
        accel_policy.set_device(accel)
        accel_policy.configure_threads(accel, ranks_on_host=1)
        train_items, heldout_items = media.split_items(recipe)    # bad data is refused before the pipeline loads
        return Island(build(recipe, accel=accel), args.learner_index, train_items, heldout_items)

    def describe(self, island: Island, recipe: DiffusionRecipe) -> dict[str, Any]:
        accel = island.built.accel
        return dict(ranks=1, shard="single", tuning="lora", dtype=str(accel.compute_dtype).removeprefix("torch."),
                    quantization="none", device=accel.kind, objective=island.built.objective,
                    **parameter_counts(island.built.model))

    def arrays(self, island: Island) -> ArrayAdapter:
        return torch_arrays(island.built.model)

    def train_batches(self, island: Island, recipe: DiffusionRecipe, args: LearnerArgs) -> Iterator[Any]:
        return media.train_batches(island.train_items, recipe, shard=args.learner_index, num_shards=args.num_learners)

    def heldout(self, island: Island, recipe: DiffusionRecipe) -> list[Any]:
        items = island.heldout_items
        return [media.batch(items[i:i + recipe.micro_batch], recipe)
                for i in range(0, len(items), recipe.micro_batch)]

    def train(self, island: Island, stream: Iterator[Any], recipe: DiffusionRecipe, *, sync: DilocoHook | None,
              on_step: Callable[[StepResult], None], start_step: int) -> list[StepResult]:
        return train(island.built, stream, recipe, generator=noise_generator(recipe, island.shard), sync=sync,
                     on_step=on_step, start_step=start_step)

    def evaluate(self, island: Island, heldout: list[Any]) -> float:
        return objective.heldout_loss(island.built, heldout)
