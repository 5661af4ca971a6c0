"""Fixtures of the diffusion tests: tiny random-init pipelines (Stable Diffusion, SD3, Flux, LTX-Video, Wan) with captioned images
and clips, built offline."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))      # e2e_stack.Stack: the real launch test


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    """{"model": a Diffusers pipeline folder, "data": 24 captioned 16x16 images (metadata.jsonl)}."""
    from yeto.learners.diffusion.tiny import write_tiny_images, write_tiny_pipeline
    root = tmp_path_factory.mktemp("diffusion")
    return {"model": write_tiny_pipeline(root / "model"), "data": write_tiny_images(root / "data", num_images=24)}


@pytest.fixture(scope="session")
def tiny_sd3(tmp_path_factory) -> Path:
    """A tiny random-init Stable Diffusion 3 pipeline folder (MMDiT transformer, flow matching)."""
    from yeto.learners.diffusion.tiny import write_tiny_pipeline
    return write_tiny_pipeline(tmp_path_factory.mktemp("sd3") / "model", family="sd3")


@pytest.fixture(scope="session")
def tiny_flux(tmp_path_factory) -> Path:
    """A tiny random-init Flux pipeline folder (double- and single-stream transformer, packed latents)."""
    from yeto.learners.diffusion.tiny import write_tiny_pipeline
    return write_tiny_pipeline(tmp_path_factory.mktemp("flux") / "model", family="flux")


@pytest.fixture(scope="session")
def tiny_ltx(tmp_path_factory) -> dict:
    """{"model": a tiny random-init LTX-Video pipeline folder, "data": 16 captioned 12-frame 32x32 MP4 clips}."""
    from yeto.learners.diffusion.tiny import write_tiny_pipeline
    from yeto.learners.diffusion.tiny_dit import write_tiny_clips
    root = tmp_path_factory.mktemp("ltx")
    return {"model": write_tiny_pipeline(root / "model", family="ltx-video"), "data": write_tiny_clips(root / "clips")}


@pytest.fixture(scope="session")
def tiny_wan(tmp_path_factory) -> Path:
    """A tiny random-init Wan (2.1 layout) pipeline folder; it trains on tiny_ltx's clips."""
    from yeto.learners.diffusion.tiny import write_tiny_pipeline
    return write_tiny_pipeline(tmp_path_factory.mktemp("wan") / "model", family="wan")
