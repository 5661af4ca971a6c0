"""The torch learner's public face: what the CLI may use (load a model and its tokenizer, the training recipe)."""
from __future__ import annotations

from yeto.learners.torch.model import load_model, load_tokenizer
from yeto.learners.torch.recipe import TrainRecipe

__all__ = ["TrainRecipe", "load_model", "load_tokenizer"]
