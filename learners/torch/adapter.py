"""The array adapter that lets diloco_sync read and write a torch module's trainable parameters as NumPy.

CPU f32 parameters are handed out as zero-copy NumPy views; accelerator (or non-f32) parameters go
through one f32 host buffer per tensor, pinned on CUDA so device-to-host copies run at full bandwidth.
A view returned by `read` aliases live weights: it changes at the next optimizer step, so the caller
encodes or copies it before training continues (diloco_sync does, between steps).
"""
from __future__ import annotations

import numpy as np
import torch


class TorchArrays:
    """Named trainable tensors of a torch module, sorted by name, as float32 NumPy arrays."""

    def __init__(self, params: list[tuple[str, torch.nn.Parameter]]) -> None:
        self._params = dict(sorted(params, key=lambda item: item[0]))
        self._host: dict[str, torch.Tensor] = {}
        for name, p in self._params.items():
            if p.device.type != "cpu" or p.dtype != torch.float32:
                pin = p.device.type == "cuda"
                self._host[name] = torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)

    @classmethod
    def of(cls, model: torch.nn.Module) -> TorchArrays:
        """The adapter over `model`'s trainable parameters (pass the unwrapped module, not DDP)."""
        return cls([(n, p) for n, p in model.named_parameters() if p.requires_grad])

    def names(self) -> list[str]:
        return list(self._params)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._params[name].shape)

    def dtype(self, name: str) -> str:
        """The parameter's own dtype name (part of the layout fingerprint), e.g. "float32", "bfloat16"."""
        return str(self._params[name].dtype).removeprefix("torch.")

    def read(self, name: str) -> np.ndarray:
        """The parameter's current value as f32 (a live view for CPU f32 parameters)."""
        param = self._params[name].detach()
        host = self._host.get(name)
        if host is None:
            return param.numpy()
        host.copy_(param, non_blocking=False)
        return host.numpy()

    @torch.no_grad()
    def write(self, name: str, value: np.ndarray) -> None:
        """Overwrite the parameter with `value` (any float dtype; cast to the parameter's dtype)."""
        param = self._params[name]
        if value.shape != tuple(param.shape):
            raise ValueError(f"{name}: value shape {value.shape} differs from parameter shape {tuple(param.shape)}")
        source = torch.from_numpy(np.ascontiguousarray(value))
        if source.data_ptr() != param.data_ptr():
            param.copy_(source)
