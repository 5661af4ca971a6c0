"""The torch backend of learners/shell.py: a causal LM on CUDA, Ascend or the CPU, one process per rank.

An island's ranks are DDP replicas or FSDP2 shards; rank 0 syncs, FSDP2's other ranks serve its gathers and scatters.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from yeto.learners import accel as accel_policy
from yeto.learners.diloco_sync import ArrayAdapter
from yeto.learners.lm_recipe import TrainRecipe, tensor_parallel_refusal
from yeto.learners.step import StepResult
from yeto.learners.sync_hook import DilocoHook
from yeto.learners.torch import batches, dist, shards
from yeto.learners.torch.build import Built, build, resolve_accel
from yeto.learners.torch.evaluate import evaluate
from yeto.learners.torch.hook import parameter_counts, torch_arrays
from yeto.learners.torch.loop import train
from yeto.learners.torch.tuning import trainable_parameters
from yeto.schemas.learner_contract import BACKENDS, LearnerArgs

T = TypeVar("T")


@dataclass(frozen=True)
class Rank:
    """One built rank and where it sits in its island."""

    built: Built
    topology: dist.Topology

    @property
    def params(self) -> list:
        return trainable_parameters(self.built.model)


class TorchBackend:
    info = BACKENDS["torch"]
    devices: tuple[str, ...] | None = accel_policy.KINDS
    max_ranks: int | None = None

    def load_recipe(self, text: str) -> TrainRecipe:
        recipe = TrainRecipe.from_json(text)
        tensor_parallel_refusal(recipe, "torch")
        return recipe

    def build(self, recipe: TrainRecipe, args: LearnerArgs) -> Rank:
        topology = dist.Topology.from_env(rank=args.rank, world_size=args.world_size, local_rank=args.local_rank,
                                          master_addr=args.master_addr, master_port=args.master_port)
        accel = resolve_accel(recipe, local_rank=topology.local_rank, prefer=args.device)
        accel_policy.set_device(accel)
        accel_policy.configure_threads(accel, ranks_on_host=topology.world_size)
        dist.init(topology, accel)
        try:
            return Rank(build(recipe, accel=accel, topology=topology), topology)
        except BaseException:
            dist.shutdown()
            raise

    def rank(self, rank: Rank) -> int:
        return rank.topology.rank

    def describe(self, rank: Rank, recipe: TrainRecipe) -> dict[str, Any]:
        built, world = rank.built, rank.topology.world_size
        return dict(ranks=world, shard="FSDP2" if built.sharded else "DDP" if world > 1 else "single", tuning=recipe.tuning,
                    dtype=str(built.accel.compute_dtype).removeprefix("torch."), quantization=recipe.base_quantization,
                    device=built.accel.kind, checkpointing=built.checkpointed, **parameter_counts(built.model))

    def arrays(self, rank: Rank) -> ArrayAdapter:
        return torch_arrays(rank.built.model)

    def on_rank0(self, rank: Rank, call: Callable[[], T] | None) -> T | None:
        return shards.on_rank0(call, rank.params, rank=rank.topology.rank, sharded=rank.built.sharded)

    def train_batches(self, rank: Rank, recipe: TrainRecipe, args: LearnerArgs) -> Iterator[Any]:
        world = rank.topology.world_size
        return batches.train_batches(recipe, rank.built.tokenizer, shard=args.learner_index * world + rank.topology.rank,
                                     num_shards=args.num_learners * world)

    def heldout(self, rank: Rank, recipe: TrainRecipe) -> list[Any]:
        # DDP replicas evaluate on rank 0 alone, unwrapped (no collectives); FSDP2 shards need every rank.
        evaluates = rank.topology.rank == 0 or rank.built.sharded
        return batches.heldout_batches(recipe, rank.built.tokenizer) if evaluates else []

    def train(self, rank: Rank, stream: Iterator[Any], recipe: TrainRecipe, *, sync: DilocoHook | None,
              on_step: Callable[[StepResult], None], start_step: int) -> list[StepResult]:
        return train(rank.built.model, stream, recipe, accel=rank.built.accel, topology=rank.topology, sync=sync,
                     on_step=on_step, wrapped=rank.built.wrapped, start_step=start_step)

    def evaluate(self, rank: Rank, heldout: list[Any]) -> float:
        model = rank.built.wrapped if rank.built.sharded else rank.built.model
        return evaluate(model, heldout, accel=rank.built.accel)

    def close(self, rank: Rank) -> None:
        dist.shutdown()
