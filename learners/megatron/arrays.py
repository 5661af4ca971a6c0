"""Rank 0's view of an expert-parallel island under the stable names (model.py), and the other ranks' service.

Only rank 0 runs the sync hook, but experts live on their expert-parallel rank. As in learners/torch/shards.py
for FSDP2, rank 0 announces each operation before taking part in it and the other ranks `serve` until it ends
its hook call: a read of an expert is broadcast from the rank that holds it; a write is broadcast from rank 0
and kept by every rank that holds the tensor (all of them for a dense one). A dense read needs no collective
and is not announced.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from yeto.learners.megatron.model import Shape, Slot, write_slot


def _announce(op: tuple[str, str] | None) -> None:
    dist.broadcast_object_list([op], src=0)


class ExpertArrays:
    """The sync hook's ArrayAdapter (learners/diloco_sync.py) over this rank's Megatron model, by stable name."""

    def __init__(self, shape: Shape, slots: dict[str, Slot], params: dict[str, torch.nn.Parameter], *,
                 ep_rank: int, distributed: bool) -> None:
        self.model_shape, self.slots, self.params = shape, slots, params
        self.ep_rank, self.distributed = ep_rank, distributed
        self._shapes: dict[str, tuple[int, ...]] = {}
        for name, slot in slots.items():       # an expert's shape is its local expert's, the same on every rank
            self._shapes[name] = tuple(slot.read(params[slot.megatron]).shape)

    def names(self) -> list[str]:
        return list(self.slots)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def dtype(self, name: str) -> str:
        return "float32"

    def _local(self, name: str) -> torch.Tensor:
        slot = self.slots[name]
        return slot.read(self.params[slot.megatron].detach()).to("cpu", torch.float32)

    def read(self, name: str) -> np.ndarray:
        slot = self.slots[name]
        if slot.owner in (-1, self.ep_rank) or not self.distributed:
            return self._local(name).numpy().copy()
        _announce(("read", name))
        return _broadcast_read(self, name).numpy()

    def write(self, name: str, value: np.ndarray) -> None:
        if tuple(value.shape) != self._shapes[name]:
            raise ValueError(f"{name}: value shape {value.shape} differs from {self._shapes[name]}")
        tensor = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
        if self.distributed:
            _announce(("write", name))
            dist.broadcast(tensor, src=0)
        self._keep(name, tensor)

    def _keep(self, name: str, value: torch.Tensor) -> None:
        slot = self.slots[name]
        if slot.owner in (-1, self.ep_rank) or not self.distributed:
            write_slot(self.model_shape, name, slot, self.params[slot.megatron], value)


def _broadcast_read(arrays: ExpertArrays, name: str) -> torch.Tensor:
    """Every rank: the expert tensor `name`, broadcast from the expert-parallel rank that holds it (EP is the island
    here: tensor and pipeline parallelism are 1, so the EP rank is the global rank)."""
    slot = arrays.slots[name]
    held = slot.owner == arrays.ep_rank
    buffer = arrays._local(name).contiguous() if held else torch.empty(arrays.shape(name), dtype=torch.float32)
    dist.broadcast(buffer, src=slot.owner)
    return buffer




def _next_op() -> tuple[str, str] | None:
    box: list[tuple[str, str] | None] = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _serve_write(arrays: ExpertArrays, name: str) -> None:
    buffer = torch.empty(arrays.shape(name), dtype=torch.float32)
    dist.broadcast(buffer, src=0)
    arrays._keep(name, buffer)


_SERVE = {"read": _broadcast_read, "write": _serve_write}


def serve(arrays: ExpertArrays) -> None:
    """Ranks other than 0: take part in rank 0's reads and writes until it ends its hook call."""
    while (op := _next_op()) is not None:
        kind, name = op
        _SERVE[kind](arrays, name)


def end_call() -> None:
    """Rank 0: its hook call is over; the serving ranks return."""
    _announce(None)
