"""The diffusion learner's public face: what the CLI and the benchmarks may use of it.

Loaded at once (the CLI's needs): its recipe, the media reader and clip check of the data contract, and the
pipeline families. Loaded on first use (they pull in Diffusers): what the diffusion benchmark drives the learner
with.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from yeto.learners.data.diffusion import MediaReport, read_media  # a media folder's captioned items, checked
from yeto.learners.diffusion.clips import clip_errors  # the clip rows that cannot give --frames frames, named
from yeto.learners.diffusion.families import family_of  # a pipeline folder's family, others refused by name
from yeto.learners.diffusion.recipe import DiffusionRecipe  # the diffusion learner's training recipe
from yeto.learners.lazy_face import lazy_names

if TYPE_CHECKING:
    from yeto.learners.diffusion import media, objective  # items to pixel batches; the denoising loss, held out too
    from yeto.learners.diffusion.components import build  # the pipeline's parts with LoRA on the denoiser
    from yeto.learners.diffusion.loop import noise_generator, train  # a shard's noise, and the inner loop
    from yeto.learners.diffusion.tiny import write_tiny_images, write_tiny_pipeline  # a CPU-size pipeline and data set
    from yeto.learners.diffusion.tiny_dit import write_tiny_clips  # captioned MP4 clips for a video family

__all__ = ["DiffusionRecipe", "MediaReport", "build", "clip_errors", "family_of", "media", "noise_generator", "objective",
           "read_media", "train", "write_tiny_clips", "write_tiny_images", "write_tiny_pipeline"]

__getattr__ = lazy_names(__name__, {
    "media": "yeto.learners.diffusion.media", "objective": "yeto.learners.diffusion.objective",
    "build": "yeto.learners.diffusion.components:build",
    "noise_generator": "yeto.learners.diffusion.loop:noise_generator", "train": "yeto.learners.diffusion.loop:train",
    "write_tiny_clips": "yeto.learners.diffusion.tiny_dit:write_tiny_clips",
    "write_tiny_images": "yeto.learners.diffusion.tiny:write_tiny_images",
    "write_tiny_pipeline": "yeto.learners.diffusion.tiny:write_tiny_pipeline"})
