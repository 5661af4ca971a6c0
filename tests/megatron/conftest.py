"""Fixtures of the Megatron-Core tests: a tiny Mixtral (4 experts) and a learnable chat set, built offline."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))      # e2e_stack.Stack: the real launch test


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory) -> dict:
    from yeto.learners.megatron.tiny import material
    return material(tmp_path_factory.mktemp("tiny-moe"))
