"""The torch learner's public face: what the CLI may use (load a model and its tokenizer, the training recipe)."""
from __future__ import annotations

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.model import load_model, load_tokenizer

__all__ = ["TrainRecipe", "load_model", "load_tokenizer"]
