"""FSDP2 islands that sync: rank 0 reads and writes whole parameters while every rank keeps only its shard.

Choice (issue 13): at a push the fragment is *gathered* on rank 0 (`full_tensor`, an all-gather over the
island), and a global version is *scattered* back (rank 0 broadcasts the whole tensor, every rank keeps its
own slice of it). Shard-aware pushes were rejected: the syncer's layout would then depend on each island's
world size and sharding, so an FSDP2 island, a DDP island and a one-GPU island of the same run could not
share fragments, keyframes or the final artifact. The price is one fragment (1/num_fragments of the trainable
parameters) at a time in rank 0's host memory at a push, never the whole model.

Gathers and scatters are collectives, and only rank 0 runs the sync hook (DilocoSync decides what to read and
write). So while rank 0 is inside a hook call (`on_rank0`), the other ranks `serve`: rank 0 broadcasts each
operation ("read" or "write" of one parameter) before taking part in it, and a final None ends the call.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor

T = TypeVar("T")


def is_sharded(params: list[tuple[str, torch.nn.Parameter]]) -> bool:
    return any(isinstance(p, DTensor) for _, p in params)


def _announce(op: tuple[str, str] | None) -> None:
    dist.broadcast_object_list([op], src=0)


def _gather(param: torch.Tensor) -> torch.Tensor:
    return param.full_tensor().detach().to("cpu", torch.float32)


@torch.no_grad()
def _scatter(param: torch.Tensor, full: torch.Tensor | None) -> None:
    """Every rank: take rank 0's whole value of `param` and keep this rank's shard of it."""
    local = param.to_local()
    buffer = full.to(local.device, local.dtype) if full is not None else torch.empty(param.shape, dtype=local.dtype,
                                                                                      device=local.device)
    dist.broadcast(buffer, src=0)
    # No communication: every rank holds the whole tensor, so each cuts its own slice as FSDP2 placed it.
    local.copy_(distribute_tensor(buffer, param.device_mesh, param.placements, src_data_rank=None).to_local())


class ShardedArrays:
    """Rank 0's array adapter over FSDP2-sharded parameters (the interface of adapter.TorchArrays)."""

    def __init__(self, params: list[tuple[str, torch.nn.Parameter]]) -> None:
        self._params = dict(sorted(params, key=lambda item: item[0]))

    def names(self) -> list[str]:
        return list(self._params)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._params[name].shape)          # the global shape, as on every other kind of island

    def dtype(self, name: str) -> str:
        return str(self._params[name].dtype).removeprefix("torch.")

    def read(self, name: str) -> np.ndarray:
        _announce(("read", name))
        return _gather(self._params[name]).numpy()

    def write(self, name: str, value: np.ndarray) -> None:
        param = self._params[name]
        if value.shape != tuple(param.shape):
            raise ValueError(f"{name}: value shape {value.shape} differs from parameter shape {tuple(param.shape)}")
        _announce(("write", name))
        _scatter(param, torch.from_numpy(np.ascontiguousarray(value)))


def serve(params: dict[str, torch.nn.Parameter]) -> None:
    """Other ranks: take part in rank 0's gathers and scatters until it ends its hook call."""
    while True:
        box: list[tuple[str, str] | None] = [None]
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            return
        op, name = box[0]
        if op == "read":
            _gather(params[name])
        else:
            _scatter(params[name], None)


def on_rank0(call: Callable[[], T] | None, params: list[tuple[str, torch.nn.Parameter]], *, rank: int,
             sharded: bool) -> T | None:
    """Run `call` on rank 0 (None elsewhere). Under FSDP2 every rank calls this at the same point, and the other
    ranks serve rank 0's gathers and scatters until `call` returns."""
    if not sharded:
        return call() if rank == 0 and call is not None else None
    if rank != 0:
        serve(dict(params))
        return None
    try:
        return call() if call is not None else None
    finally:
        _announce(None)
