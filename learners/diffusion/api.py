"""The diffusion learner's public face: what the CLI may use (its recipe, and the media reader of the data contract)."""
from __future__ import annotations

from yeto.learners.data.diffusion import MediaReport, read_media
from yeto.learners.diffusion.recipe import DiffusionRecipe

__all__ = ["DiffusionRecipe", "MediaReport", "read_media"]
