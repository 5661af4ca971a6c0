"""Fixtures of the end-to-end tests: the tiny model and chat data of tests/learner (e2e_stack.py has the rest)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
import learner_tiny


@pytest.fixture(scope="session")
def material(tmp_path_factory) -> dict:
    """A random-init 2-layer Llama with a word-level tokenizer, a learnable counting chat set, held-out rows."""
    return learner_tiny.material(tmp_path_factory.mktemp("material"))

