"""The training recipe of a diffusion learner: the launch recipe's `train` section with its `diffusion` section
flattened in (recipe.json), as one frozen record."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from yeto.learners.inner_recipe import InnerRecipe
from yeto.schemas.diffusion_section import PROMPTS
from yeto.schemas.train_section import TrainSection

ATTENTION = ("to_q", "to_k", "to_v", "to_out.0")   # Diffusers' LoRA training default on the denoiser
# What the train section carries for the causal-LM learner (data format, sequence length, sharding, ...) and a
# denoiser has no use for: accepted and ignored, so every learner reads the same section.
TRAIN_SECTION = frozenset(TrainSection.model_fields)


@dataclass(frozen=True, kw_only=True)
class DiffusionRecipe(InnerRecipe):
    """Everything that decides what a diffusion learner computes; identical on every island of a run. The fields
    every backend shares are InnerRecipe's (learners/inner_recipe.py); these are the denoiser's own."""

    model: str
    """A Diffusers pipeline folder (model_index.json) or Hub id: its unet, vae, text_encoder, tokenizer, scheduler."""
    resolution: int = 512
    """Images are resized (shorter side) and center-cropped to resolution x resolution (the diffusion section)."""
    height: int | None = None
    """Media height (a multiple of 8); None: resolution (the diffusion section)."""
    width: int | None = None
    """Media width (a multiple of 8); None: resolution (the diffusion section)."""
    frames: int = 1
    """Frames of each clip (1: images); clips are sampled to frames x height x width (the diffusion section)."""
    sample_prompts: tuple[str, ...] = PROMPTS
    """Prompts the finalizer samples before and after training (the diffusion section; learners ignore them)."""
    sample_steps: int = 8
    """Inference steps of those samples (the diffusion section)."""

    def __post_init__(self) -> None:
        self.check_shared(at_least_one=("sample_steps",))
        for name in ("resolution", "height", "width"):
            value = getattr(self, name)
            if value is not None and (value < 8 or value % 8):
                raise ValueError(f"{name} {value}: a positive multiple of 8")
        if self.frames < 1:
            raise ValueError(f"frames {self.frames}: at least 1 (1: images)")
        object.__setattr__(self, "sample_prompts", tuple(self.sample_prompts))

    @property
    def media_height(self) -> int:
        return self.height or self.resolution

    @property
    def media_width(self) -> int:
        return self.width or self.resolution

    @property
    def lora_targets(self) -> tuple[str, ...]:
        return self.target_modules or ATTENTION

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiffusionRecipe:
        known = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(data) - known - TRAIN_SECTION):
            raise ValueError(f"unknown diffusion recipe field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**{k: v for k, v in data.items() if k in known})
