"""Data parallelism inside one island: the process group, DDP or FSDP2 wrapping, small collectives.

Ranks are separate processes started by whoever launches the island (the local launcher, a SkyPilot
job's `torchrun`, or a test's `torch.multiprocessing`), each with the torchrun environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or the equivalent flags. A single-rank island
skips torch.distributed entirely.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from yeto.learners.accel import Accel


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Where this process sits in its island."""

    rank: int = 0
    """Rank inside the island; rank 0 talks to the syncer."""
    world_size: int = 1
    """Ranks in the island (the `count` of its --gpu entry)."""
    local_rank: int = 0
    """Rank on this host: picks the device."""
    master_addr: str = "127.0.0.1"
    """Rendezvous host of the island's rank 0."""
    master_port: int = 29500
    """Rendezvous port of the island's rank 0."""

    @classmethod
    def from_env(cls, **overrides) -> Topology:
        env = os.environ
        values = dict(rank=int(env.get("RANK", 0)), world_size=int(env.get("WORLD_SIZE", 1)),
                      local_rank=int(env.get("LOCAL_RANK", env.get("RANK", 0))),
                      master_addr=env.get("MASTER_ADDR", "127.0.0.1"), master_port=int(env.get("MASTER_PORT", 29500)))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init(topology: Topology, accel: Accel) -> None:
    """Join the island's process group (a no-op for one rank)."""
    if not topology.distributed:
        return
    dist.init_process_group(
        backend=accel.dist_backend, rank=topology.rank, world_size=topology.world_size,
        init_method=f"tcp://{topology.master_addr}:{topology.master_port}", timeout=timedelta(minutes=10))


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: torch.nn.Module, accel: Accel, topology: Topology, *, shard: bool) -> torch.nn.Module:
    """DDP (replicas, gradients all-reduced) or FSDP2 (each decoder layer sharded) over the island."""
    if not topology.distributed:
        return model
    if not shard:
        from torch.nn.parallel import DistributedDataParallel
        device_ids = [accel.device.index] if accel.is_accelerator else None
        return DistributedDataParallel(model, device_ids=device_ids)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mesh = init_device_mesh(accel.kind, (topology.world_size,))   # the island; a "cpu" mesh runs over gloo
    policy = MixedPrecisionPolicy(param_dtype=accel.compute_dtype, reduce_dtype=torch.float32)
    layer_classes = set(getattr(_base(model), "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in layer_classes:
            fully_shard(module, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def _base(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@contextlib.contextmanager
def gradient_sync(model: torch.nn.Module, enabled: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of an accumulated step."""
    if enabled or not dist.is_initialized():
        yield
    elif hasattr(model, "no_sync"):                       # DDP
        with model.no_sync():
            yield
    else:                                                 # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)


def all_reduce_sum(values: list[float], accel: Accel) -> list[float]:
    """Sum a few scalars over the island's ranks (identity for one rank)."""
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=accel.device)
    dist.all_reduce(tensor)
    return tensor.tolist()


@torch.no_grad()
def broadcast_parameters(params: list[torch.nn.Parameter], accel: Accel) -> None:
    """Copy rank 0's values of `params` to every rank, in one coalesced broadcast."""
    if not dist.is_initialized():
        return
    flat = torch.cat([p.detach().reshape(-1).to(torch.float32) for p in params]).to(accel.device)
    dist.broadcast(flat, src=0)
    offset = 0
    for p in params:
        p.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()
