"""The megatron backend of learners/shell.py: a Mixtral-style MoE on Megatron-Core, its experts split over the
island's ranks (expert parallelism over gloo on the CPU) and, with the recipe's tensor_parallel, its tensors split over
groups of TP ranks, every tensor trained (full fine-tuning) or LoRA adapters on the attention projections (lora.py).

Rank 0 syncs under the stable Hugging Face names (model.py); the other ranks serve its reads and writes of the
experts they hold (arrays.py). What needs CUDA is refused by name (host.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from yeto.infra.source_pins import check_data_pin, pinned_source
from yeto.learners.diloco_sync import ArrayAdapter
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.megatron import arrays as ep_arrays
from yeto.learners.megatron import host
from yeto.learners.megatron.island import Island, close_island, grad_norm, loss_sum, open_island, reduce_gradients
from yeto.learners.megatron.lora import LoraSettings, targets_of
from yeto.learners.step import StepResult
from yeto.learners.sync_hook import DilocoHook
from yeto.learners.torch import batches
from yeto.learners.torch.dist import Topology
from yeto.learners.torch.model import load_tokenizer
from yeto.learners.torch.optim import build_optimizer, lr_at, set_lr
from yeto.schemas.learner_contract import BACKENDS, LearnerArgs

T = TypeVar("T")


def check_recipe(recipe: TrainRecipe) -> None:
    """What this backend does not do, refused by name (a flag accepted and ignored would be a defect)."""
    if recipe.base_quantization != "none":
        raise ValueError("megatron backend: base_quantization must be none (no quantized Megatron-Core base is built)")
    if recipe.tuning == "lora":
        targets_of(recipe.target_modules)
        if recipe.tensor_parallel > 1:
            raise ValueError("megatron backend: LoRA with tensor parallelism is not built (the adapters are not split "
                             "over TP ranks): tensor_parallel 1, or tuning full")
        if recipe.lora_dropout:
            raise ValueError(f"megatron backend: lora_dropout {recipe.lora_dropout} is not built: 0 only")
    if recipe.shard == "fsdp":
        raise ValueError("megatron backend: shard fsdp is not supported: the island's ranks split the experts "
                         "(expert parallelism) and replicate the dense tensors")
    if recipe.dtype not in ("auto", "f32"):
        raise ValueError(f"megatron backend: dtype {recipe.dtype!r} is not supported: f32 only "
                         "(bf16 needs the GPU path of docs/MEGATRON.md)")
    if recipe.activation_checkpointing == "on":
        raise ValueError("megatron backend: activation_checkpointing on is not supported")


def lora_settings(recipe: TrainRecipe) -> LoraSettings | None:
    """The recipe's adapters (lora.py), or None for full fine-tuning."""
    if recipe.tuning != "lora":
        return None
    return LoraSettings(r=recipe.lora_r, alpha=recipe.lora_alpha, targets=targets_of(recipe.target_modules),
                        seed=recipe.seed)


class Rank:
    """This rank's island, the tokenizer and the collective context."""

    def __init__(self, island: Island, tokenizer: Any) -> None:
        self.island, self.tokenizer = island, tokenizer
        self.arrays = island.arrays()


class MegatronBackend:
    info = BACKENDS["megatron"]
    devices: tuple[str, ...] | None = ("cpu",)
    max_ranks: int | None = None

    def load_recipe(self, text: str) -> TrainRecipe:
        recipe = TrainRecipe.from_json(text)
        check_recipe(recipe)
        return recipe

    def build(self, recipe: TrainRecipe, args: LearnerArgs) -> Rank:
        if torch.cuda.is_available():
            host.refuse_cuda_only("fused kernels")   # a no-op here: CUDA hosts run the same local spec
        topology = Topology.from_env(rank=args.rank, world_size=args.world_size, local_rank=args.local_rank,
                                     master_addr=args.master_addr, master_port=args.master_port)
        source = pinned_source(recipe.model, recipe.pins.get("base"))
        if not source.is_local or source.gguf_file:
            raise ValueError(f"megatron backend: --model {recipe.model} must be a local safetensors model directory "
                             "(Hub downloads and GGUF are not built for this backend)")
        check_data_pin(recipe.data, recipe.pins.get("data"))
        torch.set_num_threads(max(1, (torch.get_num_threads() or 1) // topology.world_size))
        island = open_island(Path(source.location), rank=topology.rank, world_size=topology.world_size,
                             master_addr=topology.master_addr, master_port=topology.master_port,
                             tensor_parallel=recipe.tensor_parallel, lora=lora_settings(recipe))
        try:
            return Rank(island, load_tokenizer(source))
        except BaseException:
            close_island()
            raise

    def rank(self, rank: Rank) -> int:
        return rank.island.rank

    def describe(self, rank: Rank, recipe: TrainRecipe) -> dict[str, Any]:
        island, shape = rank.island, rank.island.shape
        trainable = sum(int(torch.Size(rank.arrays.shape(n)).numel()) for n in rank.arrays.names())
        split = f"EP{island.ep}" + (f"xTP{island.tp}" if island.tp > 1 else "")
        return dict(ranks=island.world_size, shard=split, tuning=recipe.tuning, dtype="float32", quantization="none",
                    device="cpu", experts=shape.experts, experts_per_rank=shape.experts // island.ep,
                    tensor_parallel=island.tp, trainable=trainable,
                    parameters=shape.parameters + (trainable if recipe.tuning == "lora" else 0))

    def arrays(self, rank: Rank) -> ArrayAdapter:
        return rank.arrays

    def on_rank0(self, rank: Rank, call: Callable[[], T] | None) -> T | None:
        if rank.island.world_size == 1:
            return call() if call is not None else None
        if rank.island.rank != 0:
            ep_arrays.serve(rank.arrays)
            return None
        try:
            return call() if call is not None else None
        finally:
            ep_arrays.end_call()

    def train_batches(self, rank: Rank, recipe: TrainRecipe, args: LearnerArgs) -> Iterator[Any]:
        # The TP ranks of an EP group see the same batches; the EP groups are the island's data-parallel replicas.
        replicas, replica = rank.island.ep, rank.island.layout.ep_rank
        return batches.train_batches(recipe, rank.tokenizer, shard=args.learner_index * replicas + replica,
                                     num_shards=args.num_learners * replicas)

    def heldout(self, rank: Rank, recipe: TrainRecipe) -> list[Any]:
        # Every rank evaluates the same batches: the experts' forward is a collective.
        return batches.heldout_batches(recipe, rank.tokenizer)

    def train(self, rank: Rank, stream: Iterator[Any], recipe: TrainRecipe, *, sync: DilocoHook | None,
              on_step: Callable[[StepResult], None], start_step: int) -> list[StepResult]:
        return train(rank, stream, recipe, sync=sync, on_step=on_step, start_step=start_step,
                     boundary=lambda call: bool(self.on_rank0(rank, call if rank.island.rank == 0 else None)))

    def evaluate(self, rank: Rank, heldout: list[Any]) -> float:
        island = rank.island
        island.model.eval()
        total = count = 0.0
        with torch.no_grad():
            for batch in heldout:
                loss, labelled = loss_sum(island, batch)
                total, count = total + float(loss), count + labelled
        island.model.train()
        return total / max(1.0, count)

    def close(self, rank: Rank) -> None:
        close_island()


def _sum(values: list[float], island: Island) -> list[float]:
    """The island's sums over its data-parallel replicas (the TP ranks of a replica hold the same values)."""
    if island.world_size == 1:
        return values
    box = torch.tensor(values, dtype=torch.float64, device=island.device)
    dist.all_reduce(box)
    return (box / island.tp).tolist()


def train(rank: Rank, stream: Iterator[Any], recipe: TrainRecipe, *, sync: DilocoHook | None,
          on_step: Callable[[StepResult], None] | None, start_step: int,
          boundary: Callable[[Callable[[], bool] | None], bool]) -> list[StepResult]:
    """AdamW steps over accumulated micro-batches, the DiLoCo step boundary after each (rank 0 syncs; writes reach
    the ranks that hold each tensor inside the boundary, so nothing is broadcast after it)."""
    island, replicas = rank.island, rank.island.ep
    params = [(n, p) for n, p in island.model.named_parameters() if p.requires_grad]   # LoRA: the adapters alone
    optimizer = build_optimizer(params, recipe)
    boundary((lambda: sync.join()) if sync is not None else None)
    island.model.train()
    results = []
    for step in range(start_step, recipe.max_steps):
        started = time.perf_counter()
        micro = [b for _, b in zip(range(recipe.grad_accum), stream)]
        if len(micro) < recipe.grad_accum:
            break
        (island_tokens,) = _sum([float(sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro))], island)
        scale = replicas / max(1.0, island_tokens)
        lr = lr_at(step, recipe, resumed_at=start_step)
        set_lr(optimizer, lr)
        loss_total = 0.0
        for batch in micro:
            total, _ = loss_sum(island, batch)
            (total * scale).backward()
            loss_total += float(total.detach())
        reduce_gradients(island)
        norm = grad_norm(island)
        if recipe.clip_norm > 0 and norm > recipe.clip_norm:
            for _, p in params:
                if p.grad is not None:
                    p.grad.mul_(recipe.clip_norm / (norm + 1e-6))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        changed = boundary((lambda s=step + 1, t=int(island_tokens): sync.after_step(s, t)) if sync is not None
                           else None)
        island_loss, num_changed = _sum([loss_total, float(changed)], island)
        result = StepResult(step=step + 1, loss=island_loss / max(1.0, island_tokens), tokens=int(island_tokens),
                            seconds=time.perf_counter() - started, lr=lr, synced=bool(num_changed), grad_norm=norm)
        results.append(result)
        if on_step is not None:
            on_step(result)
    return results
