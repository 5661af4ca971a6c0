"""The launch recipe's `diffusion` section: the diffusion learner's own settings, read when model_kind is "diffusion"
(the shared ones, model, data, LoRA, optimizer, steps, sync and pins, are the `train` section's)."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from yeto.schemas.train_section import Loose, PosInt, Section

MODEL_KINDS = ("lm", "diffusion")
PROMPTS = ("a red square top left", "a blue square bottom right", "a green square top right")


class DiffusionSection(Section):
    """Images or clips, and the before/after samples the finalizer draws (learners/diffusion/recipe.py)."""

    resolution: Annotated[int, Field(ge=8, multiple_of=8)] = 512
    """Images are resized (shorter side) and center-cropped to resolution x resolution."""
    height: Annotated[int, Field(ge=8, multiple_of=8)] | None = None
    """Media height; None: resolution."""
    width: Annotated[int, Field(ge=8, multiple_of=8)] | None = None
    """Media width; None: resolution."""
    frames: PosInt = 1
    """Frames sampled from each clip (1: images): a video family trains on clips of frames x height x width."""
    sample_prompts: Annotated[tuple[str, ...], Loose] = PROMPTS
    """Prompts sampled before and after training into the artifact's samples.png (empty: no grid)."""
    sample_steps: PosInt = 8
    """Inference steps of those samples (few: the grid shows the adapter's effect, not final quality)."""
