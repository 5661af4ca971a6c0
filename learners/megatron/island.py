"""One rank of a Megatron-Core island: process group, expert- and tensor-parallel state, the model loaded from the
checkpoint, and its forward pass and gradient reductions.

An island of N ranks with tensor parallelism TP runs EP = N / TP expert-parallel ranks, each a group of TP ranks
(Megatron's order: the TP ranks of a group are consecutive). The TP ranks of a group see the same batch; the
EP = N / TP groups are the data-parallel replicas of the dense tensors."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from yeto.learners.megatron import checkpoint, host
from yeto.learners.megatron.arrays import ExpertArrays, Layout
from yeto.learners.megatron.lora import LoraSettings, apply_lora
from yeto.learners.megatron.model import Shape, Slot, build_model, slots

IGNORE_INDEX = -100


@dataclass
class Island:
    """This rank's model and where it sits."""

    model: torch.nn.Module
    shape: Shape
    slots: dict[str, Slot]
    rank: int
    world_size: int
    layout: Layout

    @property
    def tp(self) -> int:
        return self.layout.tp

    @property
    def ep(self) -> int:
        """Expert-parallel ranks, and data-parallel replicas of the dense tensors."""
        return self.world_size // self.layout.tp

    @property
    def params(self) -> dict[str, torch.nn.Parameter]:
        return dict(self.model.named_parameters())

    def arrays(self) -> ExpertArrays:
        return ExpertArrays(self.shape, self.slots, self.params, layout=self.layout, distributed=self.world_size > 1)

    @property
    def device(self) -> torch.device:
        return self.model.embedding.word_embeddings.weight.device

    def expert(self, megatron_name: str) -> bool:
        return ".mlp.experts." in megatron_name


def open_island(model_dir: Path, *, rank: int, world_size: int, master_addr: str, master_port: int,
                device: str = "cpu", dispatcher: str = "allgather", tensor_parallel: int = 1,
                lora: LoraSettings | None = None) -> Island:
    """Join the island's process group (gloo on the CPU, NCCL on CUDA; world_size / tensor_parallel expert-parallel
    ranks of `tensor_parallel` TP ranks each) and build this rank's part of the model on `device`; with `lora`, the
    base frozen and adapters on its attention projections (lora.py), which are then the island's names."""
    from megatron.core import parallel_state
    from transformers import AutoConfig
    shape = Shape.of(AutoConfig.from_pretrained(model_dir))
    if tensor_parallel < 1 or world_size % tensor_parallel:
        raise ValueError(f"megatron backend: tensor parallelism {tensor_parallel} does not divide the island's "
                         f"{world_size} rank(s)")
    ep = world_size // tensor_parallel
    if lora is not None and tensor_parallel > 1:
        raise ValueError("megatron backend: LoRA with tensor parallelism is not built (the adapters are not split "
                         "over TP ranks): use --megatron-tp 1, or --tuning full")
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        host.prepare_without_te()
    else:
        host.prepare_cpu()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=world_size,
                                timeout=timedelta(minutes=10), init_method=f"tcp://{master_addr}:{master_port}")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tensor_parallel, expert_model_parallel_size=ep)
    me = (parallel_state.get_expert_model_parallel_rank(), parallel_state.get_tensor_model_parallel_rank())
    peers: list[tuple[int, int]] = [me] * world_size
    if world_size > 1:
        dist.all_gather_object(peers, me)
    torch.manual_seed(0)
    if device == "cuda":
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
        model_parallel_cuda_manual_seed(0)
    model = build_model(shape, expert_parallel=ep, tensor_parallel=tensor_parallel, dispatcher=dispatcher)
    names = slots(shape, expert_parallel=ep)
    checkpoint.load(model_dir, shape, names, dict(model.named_parameters()), ep_rank=me[0], tp=tensor_parallel,
                    tp_rank=me[1])
    layout = Layout(ep_rank=me[0], tp=tensor_parallel, tp_rank=me[1], peers=tuple(peers))
    if lora is not None:
        names = apply_lora(model, shape, lora)
    return Island(model.to(device), shape, names, rank, world_size, layout)


def close_island() -> None:
    from megatron.core import parallel_state
    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def logits(island: Island, input_ids: torch.Tensor) -> torch.Tensor:
    """[batch, seq, vocab] logits; every rank of the island calls it at once (the experts' tokens are gathered; with
    TP the sequence is split over the TP ranks and the logits gathered whole on each)."""
    seq, device = input_ids.shape[1], island.device
    if seq % island.tp:
        raise ValueError(f"megatron backend: a sequence of {seq} tokens does not split over tensor parallelism "
                         f"{island.tp} (sequence parallelism): use a seq_len divisible by it")
    input_ids = input_ids.to(device)
    positions = torch.arange(seq, device=device).unsqueeze(0).expand_as(input_ids)
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=device), diagonal=1)[None, None]
    return island.model(input_ids, positions, mask)[..., :island.shape.vocab]


def loss_sum(island: Island, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the labelled tokens (labels as Hugging Face gives them, unshifted)."""
    out = logits(island, batch["input_ids"])[:, :-1]
    labels = batch["labels"][:, 1:].to(out.device)
    total = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), labels.reshape(-1),
                                              ignore_index=IGNORE_INDEX, reduction="sum")
    return total, int((labels != IGNORE_INDEX).sum())


def reduce_gradients(island: Island) -> None:
    """A sequence-parallel tensor's gradient (norms, router) is summed over its TP ranks (each saw its part of the
    sequence); dense gradients are averaged over the EP = N / TP data-parallel replicas; an expert's gradient already
    holds every replica's tokens (the all-gather dispatcher's backward), so it is divided by the replicas alone."""
    from megatron.core import parallel_state
    if island.world_size == 1:
        return
    replicas = island.ep
    for name, param in island.model.named_parameters():
        if param.grad is None:
            continue
        if island.tp > 1 and getattr(param, "sequence_parallel", False):
            dist.all_reduce(param.grad, group=parallel_state.get_tensor_model_parallel_group())
        if replicas > 1 and not island.expert(name):
            dist.all_reduce(param.grad, group=parallel_state.get_data_parallel_group())
        param.grad /= replicas


def grad_norm(island: Island) -> float:
    """The whole model's gradient norm, each piece counted once: a tensor every rank holds whole on rank 0, a TP
    shard of a dense tensor on the first replica's TP ranks, an expert (or its shard) on the rank holding it."""
    from yeto.learners.megatron.model import partition_dim
    total = 0.0
    for name, param in island.model.named_parameters():
        if param.grad is None:
            continue
        split = partition_dim(param, island.tp) is not None
        counted = island.expert(name) or (island.layout.ep_rank == 0 if split else island.rank == 0)
        if counted or island.world_size == 1:
            total += float(param.grad.detach().float().pow(2).sum())
    if island.world_size > 1:
        box = torch.tensor([total], dtype=torch.float64, device=island.device)
        dist.all_reduce(box)
        total = float(box)
    return total ** 0.5
