"""One rank of a Megatron-Core island: process group, expert-parallel state, the model loaded from the checkpoint,
and its forward pass and gradient reductions (data parallel for dense tensors, none needed across experts)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from yeto.learners.megatron import checkpoint, host
from yeto.learners.megatron.arrays import ExpertArrays
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

    @property
    def params(self) -> dict[str, torch.nn.Parameter]:
        return dict(self.model.named_parameters())

    def arrays(self) -> ExpertArrays:
        return ExpertArrays(self.shape, self.slots, self.params, ep_rank=self.rank, distributed=self.world_size > 1)

    @property
    def device(self) -> torch.device:
        return self.model.embedding.word_embeddings.weight.device

    def expert(self, megatron_name: str) -> bool:
        return ".mlp.experts." in megatron_name


def open_island(model_dir: Path, *, rank: int, world_size: int, master_addr: str, master_port: int,
                device: str = "cpu", dispatcher: str = "allgather") -> Island:
    """Join the island's process group (gloo on the CPU, NCCL on CUDA; every rank one expert-parallel rank) and build
    this rank's part of the model on `device`."""
    from megatron.core import parallel_state
    from transformers import AutoConfig
    shape = Shape.of(AutoConfig.from_pretrained(model_dir))
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        host.prepare_without_te()
    else:
        host.prepare_cpu()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=world_size,
                                timeout=timedelta(minutes=10), init_method=f"tcp://{master_addr}:{master_port}")
    parallel_state.initialize_model_parallel(expert_model_parallel_size=world_size)
    torch.manual_seed(0)
    if device == "cuda":
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
        model_parallel_cuda_manual_seed(0)
    model = build_model(shape, expert_parallel=world_size, dispatcher=dispatcher)
    layout = slots(shape, expert_parallel=world_size)
    checkpoint.load(model_dir, shape, layout, dict(model.named_parameters()), ep_rank=rank)
    return Island(model.to(device), shape, layout, rank, world_size)


def close_island() -> None:
    from megatron.core import parallel_state
    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def logits(island: Island, input_ids: torch.Tensor) -> torch.Tensor:
    """[batch, seq, vocab] logits; every rank of the island calls it at once (the experts' tokens are gathered)."""
    seq, device = input_ids.shape[1], island.device
    input_ids = input_ids.to(device)
    positions = torch.arange(seq, device=device).unsqueeze(0).expand_as(input_ids)
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=device), diagonal=1)[None, None]
    return island.model(input_ids, positions, mask)


def loss_sum(island: Island, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the labelled tokens (labels as Hugging Face gives them, unshifted)."""
    out = logits(island, batch["input_ids"])[:, :-1]
    labels = batch["labels"][:, 1:].to(out.device)
    total = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), labels.reshape(-1),
                                              ignore_index=IGNORE_INDEX, reduction="sum")
    return total, int((labels != IGNORE_INDEX).sum())


def reduce_gradients(island: Island) -> None:
    """Dense gradients are averaged over the island's ranks (data parallel); an expert's gradient already holds
    every rank's tokens (the all-gather dispatcher's backward), so it is divided by the ranks alone."""
    if island.world_size == 1:
        return
    for name, param in island.model.named_parameters():
        if param.grad is None:
            continue
        if not island.expert(name):
            dist.all_reduce(param.grad)
        param.grad /= island.world_size


def grad_norm(island: Island) -> float:
    """The whole model's gradient norm: dense tensors counted once, each expert on its rank."""
    dense = expert = 0.0
    for name, param in island.model.named_parameters():
        if param.grad is not None:
            squared = float(param.grad.detach().float().pow(2).sum())
            expert, dense = (expert + squared, dense) if island.expert(name) else (expert, dense + squared)
    if island.world_size > 1:
        box = torch.tensor([expert], dtype=torch.float64, device=island.device)
        dist.all_reduce(box)
        expert = float(box)
    return (dense + expert) ** 0.5
