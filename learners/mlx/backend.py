"""The MLX backend of learners/shell.py: LoRA on a causal LM in MLX, one process per island.

Apple silicon's GPU, MLX's CPU backend elsewhere. MLX itself is imported when the learner builds, so `--help`
needs none."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from yeto.learners.diloco_sync import ArrayAdapter
from yeto.learners.lm_recipe import TrainRecipe, tensor_parallel_refusal
from yeto.learners.shell import OneRank
from yeto.learners.step import StepResult
from yeto.learners.sync_hook import DilocoHook
from yeto.schemas.learner_contract import BACKENDS, LearnerArgs


@dataclass(frozen=True)
class Built:
    model: Any
    tokenizer: Any


class MlxBackend(OneRank):
    info = BACKENDS["mlx"]
    devices: tuple[str, ...] | None = ("gpu", "cpu", "cuda")   # cuda is read as gpu

    def load_recipe(self, text: str) -> TrainRecipe:
        recipe = TrainRecipe.from_json(text)
        tensor_parallel_refusal(recipe, "mlx")
        return recipe

    def build(self, recipe: TrainRecipe, args: LearnerArgs) -> Built:
        from yeto.learners.mlx.build import build
        return Built(*build(recipe, device=args.device))

    def describe(self, built: Built, recipe: TrainRecipe) -> dict[str, Any]:
        import mlx.core as mx
        from mlx.utils import tree_flatten

        from yeto.learners.mlx.adapter import MlxArrays
        arrays = MlxArrays(built.model)
        trainable = sum(int(np.prod(arrays.shape(n))) for n in arrays.names())
        return dict(ranks=1, shard="single", tuning=recipe.tuning, dtype=recipe.dtype, quantization="none",
                    device=str(mx.default_device()), trainable=trainable,
                    parameters=sum(int(v.size) for _, v in tree_flatten(built.model.parameters())))

    def arrays(self, built: Built) -> ArrayAdapter:
        from yeto.learners.mlx.adapter import MlxArrays
        return MlxArrays(built.model)

    def train_batches(self, built: Built, recipe: TrainRecipe, args: LearnerArgs) -> Iterator[Any]:
        from yeto.learners.mlx import batches
        return batches.train_batches(recipe, built.tokenizer, shard=args.learner_index, num_shards=args.num_learners)

    def heldout(self, built: Built, recipe: TrainRecipe) -> list[Any]:
        from yeto.learners.mlx import batches
        return batches.heldout_batches(recipe, built.tokenizer)

    def train(self, built: Built, stream: Iterator[Any], recipe: TrainRecipe, *, sync: DilocoHook | None,
              on_step: Callable[[StepResult], None], start_step: int) -> list[StepResult]:
        from yeto.learners.mlx.loop import train
        return train(built.model, stream, recipe, sync=sync, on_step=on_step, start_step=start_step)

    def evaluate(self, built: Built, heldout: list[Any]) -> float:
        from yeto.learners.mlx.loop import evaluate
        return evaluate(built.model, heldout)
