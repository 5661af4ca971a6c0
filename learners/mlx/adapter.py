"""The array adapter that lets diloco_sync read and write an MLX model's LoRA tensors as NumPy, under peft's names."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from yeto.learners.mlx.lora import trainable


class MlxArrays:
    """Named trainable tensors of an MLX model, sorted by their peft names, as float32 NumPy arrays (copies: MLX
    arrays are immutable, so `write` puts a new array in the model where the old one was)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._paths = dict(sorted(trainable(model).items()))

    def names(self) -> list[str]:
        return list(self._paths)

    def _get(self, name: str) -> mx.array:
        *parents, leaf = self._paths[name].split(".")
        return self._parent(parents)[leaf]

    def _parent(self, parts: list[str]):
        node = self.model
        for part in parts:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._get(name).shape)

    def dtype(self, name: str) -> str:
        """"float32" like torch's name for it (part of the layout fingerprint)."""
        return str(self._get(name).dtype).removeprefix("mlx.core.")

    def read(self, name: str) -> np.ndarray:
        return np.array(self._get(name).astype(mx.float32), copy=True)

    def write(self, name: str, value: np.ndarray) -> None:
        *parents, leaf = self._paths[name].split(".")
        old = self._get(name)
        if tuple(value.shape) != tuple(old.shape):
            raise ValueError(f"{name}: value shape {value.shape} differs from parameter shape {tuple(old.shape)}")
        self._parent(parents)[leaf] = mx.array(np.ascontiguousarray(value, dtype=np.float32)).astype(old.dtype)
