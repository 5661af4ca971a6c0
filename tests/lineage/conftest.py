"""Fixtures of the lineage tests: the end-to-end stack and the tiny model of tests/e2e and tests/learner."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
sys.path.insert(0, str(Path(__file__).parents[1]))
import learner_tiny


@pytest.fixture(scope="session")
def material(tmp_path_factory) -> dict:
    """A random-init 2-layer Llama with a word-level tokenizer, a learnable counting chat set, held-out rows."""
    return learner_tiny.material(tmp_path_factory.mktemp("material"))
