"""LoRA on a Megatron-Core island's dense attention projections, under the names peft gives them (docs/MEGATRON.md).

`--tuning lora` on the megatron backend freezes the base and adds low-rank adapters beside the attention's
projections: q_proj, k_proj and v_proj inside Megatron's fused `linear_qkv` (each adapter's output added to its rows
of the grouped layout, model.qkv_index) and o_proj beside `linear_proj`. The experts, the router and the norms stay
frozen (LoRA on the experts is not built: `target_modules` naming w1/w2/w3 is refused). The sync layout and the
artifact use peft's names (`base_model.model.model.layers.L.self_attn.q_proj.lora_A.default.weight`), so the
finalizer writes the adapter the torch backend's runs write, which peft loads onto the base checkpoint.

As peft does: A is drawn Kaiming-uniform (a = sqrt(5)) and B is zero, so the adapted model starts as the base, and
the adapter's output is scaled by lora_alpha / r. The draw is seeded with the run's seed on the CPU, in the same order
on every island, so every island starts with the same adapters. Tensor parallelism with LoRA is refused (the
adapters would need splitting as their base layers are; not built).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from yeto.learners.megatron.model import Shape, Slot, qkv_index

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
PEFT_PREFIX = "base_model.model."
ADAPTER = "default"


@dataclass(frozen=True)
class LoraSettings:
    r: int
    alpha: int
    targets: tuple[str, ...]
    seed: int

    @property
    def scale(self) -> float:
        return self.alpha / self.r


def targets_of(target_modules: tuple[str, ...]) -> tuple[str, ...]:
    """The recipe's target modules (empty: all four attention projections); ValueError naming one not built."""
    if not target_modules:
        return TARGETS
    if unknown := [t for t in target_modules if t not in TARGETS]:
        raise ValueError(f"megatron backend: LoRA target module(s) {', '.join(unknown)} are not built: it adapts "
                         f"the attention projections {', '.join(TARGETS)} (docs/MEGATRON.md)")
    return tuple(t for t in TARGETS if t in target_modules)


class _Adapter(torch.nn.Module):
    """One low-rank pair: A [r, in], B [out, r]."""

    def __init__(self, fan_in: int, fan_out: int, r: int) -> None:
        super().__init__()
        self.lora_A = torch.nn.Parameter(torch.empty(r, fan_in))
        self.lora_B = torch.nn.Parameter(torch.zeros(fan_out, r))
        torch.nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(torch.nn.functional.linear(x, self.lora_A), self.lora_B)


class LoraQKV(torch.nn.Module):
    """Megatron's fused linear_qkv with adapters for some of q, k and v, each added to its rows."""

    def __init__(self, base: torch.nn.Module, shape: Shape, settings: LoraSettings) -> None:
        super().__init__()
        self.base, self.scale = base, settings.scale
        widths = {"q": shape.heads * shape.head_dim, "k": shape.kv_heads * shape.head_dim,
                  "v": shape.kv_heads * shape.head_dim}
        self.which = [w for w in "qkv" if f"{w}_proj" in settings.targets]
        self.adapters = torch.nn.ModuleDict({w: _Adapter(shape.hidden, widths[w], settings.r) for w in self.which})
        for w in self.which:
            self.register_buffer(f"rows_{w}", qkv_index(shape, w), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out, bias = self.base(x)
        for w in self.which:
            out = out.index_add(-1, getattr(self, f"rows_{w}"), self.adapters[w](x) * self.scale)
        return out, bias


class LoraProj(torch.nn.Module):
    """Megatron's linear_proj (o_proj) with an adapter beside it."""

    def __init__(self, base: torch.nn.Module, shape: Shape, settings: LoraSettings) -> None:
        super().__init__()
        self.base, self.scale = base, settings.scale
        self.adapter = _Adapter(shape.hidden, shape.hidden, settings.r)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out, bias = self.base(x)
        return out + self.adapter(x) * self.scale, bias


def apply_lora(model: torch.nn.Module, shape: Shape, settings: LoraSettings) -> dict[str, Slot]:
    """Freeze the model, wrap its attention projections, and return the adapters' slots under peft's names."""
    for param in model.parameters():
        param.requires_grad_(False)
    out: dict[str, Slot] = {}
    whole = Slot("", -1, lambda t: t).read
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        for layer in range(shape.layers):
            attention = model.decoder.layers[layer].self_attention
            mc, hf = f"decoder.layers.{layer}.self_attention", f"{PEFT_PREFIX}model.layers.{layer}.self_attn"
            if any(t != "o_proj" for t in settings.targets):
                attention.linear_qkv = LoraQKV(attention.linear_qkv, shape, settings)
                for w in attention.linear_qkv.which:
                    for ab in ("A", "B"):
                        out[f"{hf}.{w}_proj.lora_{ab}.{ADAPTER}.weight"] = Slot(
                            f"{mc}.linear_qkv.adapters.{w}.lora_{ab}", -1, whole)
            if "o_proj" in settings.targets:
                attention.linear_proj = LoraProj(attention.linear_proj, shape, settings)
                for ab in ("A", "B"):
                    out[f"{hf}.o_proj.lora_{ab}.{ADAPTER}.weight"] = Slot(
                        f"{mc}.linear_proj.adapter.lora_{ab}", -1, whole)
    return dict(sorted(out.items()))
