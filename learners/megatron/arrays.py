"""Rank 0's view of a Megatron-Core island under the stable names (model.py), and the other ranks' service.

Only rank 0 runs the sync hook, but experts live on their expert-parallel rank and, with tensor parallelism, a tensor
is split over the TP ranks. As in learners/torch/shards.py for FSDP2, rank 0 announces each operation before taking
part in it and the other ranks `serve` until it ends its hook call:
- a read of an expert another EP rank holds (TP 1) is broadcast from that rank;
- a read of a TP-split tensor is an all-gather of every rank's shard; rank 0 joins the shards of the ranks that hold
  it (model.unshard) into the layout of TP 1, and cuts the stable tensor out of it;
- a write is broadcast from rank 0 and kept by every rank that holds the tensor (all of them for a dense one); a
  TP-split tensor is gathered whole first, the stable tensor written into it, and each rank keeps its shard of it.
A read of a tensor rank 0 holds whole needs no collective and is not announced.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from yeto.learners.megatron.model import Shape, Slot, partition_dim, shard_of, unshard, whole_shape, write_slot


@dataclass(frozen=True)
class Layout:
    """Where this rank sits in its island: its EP and TP ranks, and every rank's (EP rank, TP rank) by global rank."""

    ep_rank: int = 0
    tp: int = 1
    tp_rank: int = 0
    peers: tuple[tuple[int, int], ...] = ((0, 0),)

    def holders(self, owner: int) -> list[int]:
        """The global ranks whose shards make up a tensor of EP rank `owner` (-1: dense, EP rank 0's copy), by TP rank."""
        ep = max(owner, 0)
        return sorted((r for r, (e, _) in enumerate(self.peers) if e == ep), key=lambda r: self.peers[r][1])


def _announce(op: tuple[str, str] | None) -> None:
    dist.broadcast_object_list([op], src=0)


class ExpertArrays:
    """The sync hook's ArrayAdapter (learners/diloco_sync.py) over this rank's Megatron model, by stable name."""

    def __init__(self, shape: Shape, slots: dict[str, Slot], params: dict[str, torch.nn.Parameter], *,
                 layout: Layout, distributed: bool) -> None:
        self.model_shape, self.slots, self.params = shape, slots, params
        self.layout, self.ep_rank, self.distributed = layout, layout.ep_rank, distributed
        self._shapes: dict[str, tuple[int, ...]] = {}
        for name, slot in slots.items():       # an expert's shape is its local expert's, the same on every rank
            whole = whole_shape(params[slot.megatron], self._dim(slot.megatron), self.layout.tp)
            self._shapes[name] = tuple(slot.read(torch.empty(whole, device="meta")).shape)

    def _dim(self, megatron: str) -> int | None:
        return partition_dim(self.params[megatron], self.layout.tp)

    def names(self) -> list[str]:
        return list(self.slots)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def dtype(self, name: str) -> str:
        return "float32"

    def holds(self, slot: Slot) -> bool:
        return slot.owner in (-1, self.ep_rank) or not self.distributed

    def collective(self, name: str) -> bool:
        """Whether rank 0 needs the other ranks to read `name` (an expert held elsewhere, or a TP-split tensor)."""
        slot = self.slots[name]
        return self.distributed and (not self.holds(slot) or self._dim(slot.megatron) is not None)

    def _local(self, name: str) -> torch.Tensor:
        slot = self.slots[name]
        return slot.read(self.params[slot.megatron].detach()).to("cpu", torch.float32)

    def read(self, name: str) -> np.ndarray:
        if not self.collective(name):
            return self._local(name).numpy().copy()
        _announce(("read", name))
        return _collective_read(self, name).numpy()

    def write(self, name: str, value: np.ndarray) -> None:
        if tuple(value.shape) != self._shapes[name]:
            raise ValueError(f"{name}: value shape {value.shape} differs from {self._shapes[name]}")
        tensor = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
        if self.distributed:
            _announce(("write", name))
            dist.broadcast(tensor, src=0)
        self._keep(name, tensor)

    def whole(self, megatron: str, owner: int) -> torch.Tensor:
        """Every rank at once: the whole Megatron tensor `megatron` of EP rank `owner` in the layout of TP 1 (its
        shards all-gathered; a rank that does not hold it sends zeros)."""
        param, dim = self.params[megatron].detach(), self._dim(megatron)
        held = owner in (-1, self.ep_rank)
        mine = param.to("cpu", torch.float32).contiguous() if held else torch.zeros(param.shape, dtype=torch.float32)
        if dim is None:
            return mine
        shards = [torch.empty_like(mine) for _ in self.layout.peers]
        dist.all_gather(shards, mine)
        return unshard(megatron, [shards[r] for r in self.layout.holders(owner)], dim)

    def _keep(self, name: str, value: torch.Tensor) -> None:
        slot = self.slots[name]
        param, dim = self.params[slot.megatron], self._dim(slot.megatron)
        if dim is None:
            if self.holds(slot):
                write_slot(self.model_shape, name, slot, param, value)
            return
        whole = self.whole(slot.megatron, slot.owner)          # every rank takes part
        if self.holds(slot):
            write_slot(self.model_shape, name, slot, whole, value)
            with torch.no_grad():
                param.copy_(shard_of(slot.megatron, whole, dim, self.layout.tp, self.layout.tp_rank))


def _collective_read(arrays: ExpertArrays, name: str) -> torch.Tensor:
    """Every rank: the stable tensor `name`: a TP-split one gathered whole, else (an expert, TP 1) broadcast from the
    expert-parallel rank that holds it."""
    slot = arrays.slots[name]
    if arrays._dim(slot.megatron) is not None:
        return slot.read(arrays.whole(slot.megatron, slot.owner)).contiguous()
    held = slot.owner == arrays.ep_rank
    buffer = arrays._local(name).contiguous() if held else torch.empty(arrays.shape(name), dtype=torch.float32)
    dist.broadcast(buffer, src=arrays.layout.holders(slot.owner)[0])
    return buffer


def _next_op() -> tuple[str, str] | None:
    box: list[tuple[str, str] | None] = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _serve_write(arrays: ExpertArrays, name: str) -> None:
    buffer = torch.empty(arrays.shape(name), dtype=torch.float32)
    dist.broadcast(buffer, src=0)
    arrays._keep(name, buffer)


_SERVE = {"read": _collective_read, "write": _serve_write}


def serve(arrays: ExpertArrays) -> None:
    """Ranks other than 0: take part in rank 0's reads and writes until it ends its hook call."""
    while (op := _next_op()) is not None:
        kind, name = op
        _SERVE[kind](arrays, name)


def end_call() -> None:
    """Rank 0: its hook call is over; the serving ranks return."""
    _announce(None)
