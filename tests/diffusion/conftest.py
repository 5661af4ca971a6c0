"""Fixtures of the diffusion tests: a tiny random-init Stable Diffusion pipeline and captioned images, built offline."""
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
