"""The training recipe of a diffusion learner: the launch recipe's `train` section with its `diffusion` section
flattened in (recipe.json), as one frozen record."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from yeto.learners.torch.recipe import DTYPES, SCHEDULES
from yeto.schemas.diffusion_section import PROMPTS
from yeto.schemas.train_section import TrainSection

ATTENTION = ("to_q", "to_k", "to_v", "to_out.0")   # Diffusers' LoRA training default on the denoiser
# What the train section carries for the causal-LM learner (data format, sequence length, sharding, ...) and a
# denoiser has no use for: accepted and ignored, so every learner reads the same section.
TRAIN_SECTION = frozenset(TrainSection.model_fields)


@dataclass(frozen=True, kw_only=True)
class DiffusionRecipe:
    """Everything that decides what a diffusion learner computes; identical on every island of a run. Shared
    fields have the train section's defaults (schemas/train_section.py)."""

    model: str
    """A Diffusers pipeline folder (model_index.json) or Hub id: its unet, vae, text_encoder, tokenizer, scheduler."""
    data: str = ""
    """Images with captions: a folder with metadata.jsonl, or a table with file_name/image and text columns."""
    heldout_fraction: float = 0.02
    """Fraction of images kept out of training for the held-out denoising loss (every 1/fraction-th image)."""
    eval_every: int = 0
    """Held-out denoising loss every N inner steps, reported on the tape (0: only at the end)."""
    lora_r: int = 16
    """LoRA rank on the denoiser."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    target_modules: tuple[str, ...] = ()
    """Denoiser modules LoRA wraps; empty: the attention projections (ATTENTION)."""
    lr: float = 3e-4
    """Peak inner AdamW learning rate (Diffusers' LoRA scripts use 1e-4)."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW moment decay rates."""
    warmup_steps: int = 20
    """Inner steps of linear warmup."""
    schedule: str = "cosine"
    """After warmup: "cosine" or "linear" to `min_lr_ratio * lr`, or "constant"."""
    min_lr_ratio: float = 0.1
    """Floor of the decaying schedules as a fraction of `lr`."""
    max_steps: int = 1000
    """Inner optimizer steps of one learner."""
    start_step: int = 0
    """The step a replacement or a resumed lineage continues from."""
    clip_norm: float = 1.0
    """Gradient norm clipping threshold (0 disables)."""
    micro_batch: int = 4
    """Images per forward pass."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step."""
    seed: int = 0
    """Shared seed: LoRA init (identical on every island), data order, noise and timesteps."""
    dtype: str = "auto"
    """Compute dtype of the frozen parts and autocast: "auto" (bf16 on accelerators, f32 on CPU), "bf16" or "f32"."""
    resolution: int = 512
    """Images are resized (shorter side) and center-cropped to resolution x resolution (the diffusion section)."""
    sample_prompts: tuple[str, ...] = PROMPTS
    """Prompts the finalizer samples before and after training (the diffusion section; learners ignore them)."""
    sample_steps: int = 8
    """Inference steps of those samples (the diffusion section)."""
    sync: dict[str, Any] = field(default_factory=dict)
    """Options of the step-boundary sync (learners/diloco_sync.py), passed through unchanged."""
    pins: dict[str, Any] = field(default_factory=dict)
    """What launch pinned, {"base": ..., "data": ...}; each island checks it before training."""

    def __post_init__(self) -> None:
        for name, choices in (("schedule", SCHEDULES), ("dtype", DTYPES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {', '.join(choices)}")
        for name in ("max_steps", "micro_batch", "grad_accum", "lora_r", "sample_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.resolution < 8 or self.resolution % 8:
            raise ValueError(f"resolution {self.resolution}: a positive multiple of 8")
        if not 0 <= self.heldout_fraction < 1 or self.lr <= 0 or self.warmup_steps < 0 or self.eval_every < 0:
            raise ValueError("heldout_fraction must be in [0, 1), lr > 0, warmup_steps and eval_every >= 0")
        for name in ("target_modules", "betas", "sample_prompts"):    # lists from JSON: immutable and comparable
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def lora_targets(self) -> tuple[str, ...]:
        return self.target_modules or ATTENTION

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiffusionRecipe:
        known = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(data) - known - TRAIN_SECTION):
            raise ValueError(f"unknown diffusion recipe field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> DiffusionRecipe:
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> DiffusionRecipe:
        return dataclasses.replace(self, **changes)
