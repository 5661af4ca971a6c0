"""The recipe fields every learner backend shares (optimizer, schedule, LoRA, batch, seed, sync, pins): one frozen base
that the causal-LM recipe (learners/lm_recipe.py) and the diffusion one (learners/diffusion/recipe.py) extend."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Self

SCHEDULES = ("cosine", "constant", "linear")
DTYPES = ("auto", "bf16", "f32")


@dataclass(frozen=True, kw_only=True)
class InnerRecipe:
    """What decides a learner's inner loop; identical on every island of a run. Defaults are the launch recipe's
    train section's (schemas/train_section.py)."""

    model: str
    """The base: what it may name is the backend's (a model alias, HF id or directory; a Diffusers pipeline)."""
    data: str = ""
    """Training data: a path or dataset id (empty: supplied by the caller)."""
    heldout_fraction: float = 0.02
    """Fraction of examples kept out of training for the held-out loss."""
    eval_every: int = 0
    """Held-out evaluation every N inner steps, reported on the tape (0: only at the end)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    target_modules: tuple[str, ...] = ()
    """Module names LoRA wraps; empty: the backend's default for the architecture."""
    lr: float = 3e-4
    """Peak inner AdamW learning rate (3e-4 suits LoRA; full tuning of an LM wants ~1e-5 to 5e-5)."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW moment decay rates."""
    warmup_steps: int = 20
    """Inner steps of linear warmup from 0 to `lr`."""
    schedule: str = "cosine"
    """After warmup: "cosine" or "linear" decays to `min_lr_ratio * lr` at `max_steps`; "constant" stays at `lr`."""
    min_lr_ratio: float = 0.1
    """Floor of the decaying schedules as a fraction of `lr`."""
    max_steps: int = 1000
    """Inner optimizer steps of one learner (the schedule's horizon and the loop's end)."""
    start_step: int = 0
    """The step a replacement or a resumed lineage continues from: step count, schedule, data position."""
    clip_norm: float = 1.0
    """Gradient norm clipping threshold (0 disables)."""
    micro_batch: int = 4
    """Examples (sequences, images) per forward pass on one rank."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step on one rank."""
    seed: int = 0
    """Shared seed: LoRA / random init (identical on every island), data order, noise."""
    dtype: str = "auto"
    """Compute dtype: "auto" (bf16 on accelerators, f32 on CPU), "bf16" or "f32"."""
    sync: dict[str, Any] = field(default_factory=dict)
    """Options of the step-boundary sync (learners/diloco_sync.py), passed through unchanged."""
    pins: dict[str, Any] = field(default_factory=dict)
    """What launch pinned, {"base": ..., "data": ...} (infra/source_pins.py); each island checks it before training."""

    def check_shared(self, *, at_least_one: tuple[str, ...]) -> None:
        """The checks every backend makes: choices, counts of at least one, signs; JSON lists made tuples."""
        for name, choices in (("schedule", SCHEDULES), ("dtype", DTYPES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {', '.join(choices)}")
        for name in ("max_steps", "micro_batch", "grad_accum", "lora_r", *at_least_one):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.heldout_fraction < 1 or self.lr <= 0 or self.warmup_steps < 0 or self.eval_every < 0:
            raise ValueError("heldout_fraction must be in [0, 1), lr > 0, warmup_steps and eval_every >= 0")
        for name in ("target_modules", "betas"):     # lists from JSON: the record stays immutable and comparable
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown recipe field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)
