"""The torch learner's public face: what the CLI and the benchmarks may use of it.

Loaded at once (the CLI's needs): the training recipe, a model and its tokenizer by name. Loaded on first use (they
pull in the training loop and torch.distributed): what the benchmarks drive the learner with.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from yeto.learners.console import quieted  # the libraries' bars and deprecation notices silenced for a command's time
from yeto.learners.lazy_face import lazy_names
from yeto.learners.lm_recipe import TrainRecipe  # the LM learner's training recipe
from yeto.learners.torch.model import load_model, load_tokenizer, resolve  # a --model by name: its folder, weights, tokenizer

if TYPE_CHECKING:
    from yeto.learners.torch import dist, tiny  # DDP/FSDP2 inside an island; tiny local model, tokenizer and chat rows
    from yeto.learners.torch.adapter import TorchArrays  # a module's trainable tensors as the sync reads and writes them
    from yeto.learners.torch.batches import heldout_batches, train_batches  # a recipe's data as packed token batches
    from yeto.learners.torch.build import build, resolve_accel  # the model a recipe asks for, on the device it picks
    from yeto.learners.torch.evaluate import evaluate, loss_sum, to_device  # held-out loss; a batch onto the device
    from yeto.learners.torch.hook import make_hook  # DilocoHook over a module's trainable parameters
    from yeto.learners.torch.loop import train  # the inner loop: steps, with the sync hook at each step boundary
    from yeto.learners.torch.optim import build_optimizer, lr_at, set_lr  # AdamW and the learning-rate schedule
    from yeto.learners.torch.tuning import apply_tuning, trainable_parameters  # LoRA or full tuning, and what it trains

__all__ = ["TorchArrays", "TrainRecipe", "apply_tuning", "build", "build_optimizer", "dist", "evaluate", "heldout_batches",
           "load_model", "load_tokenizer", "loss_sum", "lr_at", "make_hook", "quieted", "resolve", "resolve_accel",
           "set_lr", "tiny", "to_device", "train", "train_batches", "trainable_parameters"]

__getattr__ = lazy_names(__name__, {
    "dist": "yeto.learners.torch.dist", "tiny": "yeto.learners.torch.tiny",
    "TorchArrays": "yeto.learners.torch.adapter:TorchArrays",
    "heldout_batches": "yeto.learners.torch.batches:heldout_batches",
    "train_batches": "yeto.learners.torch.batches:train_batches",
    "build": "yeto.learners.torch.build:build", "resolve_accel": "yeto.learners.torch.build:resolve_accel",
    "evaluate": "yeto.learners.torch.evaluate:evaluate", "loss_sum": "yeto.learners.torch.evaluate:loss_sum",
    "to_device": "yeto.learners.torch.evaluate:to_device",
    "make_hook": "yeto.learners.torch.hook:make_hook", "train": "yeto.learners.torch.loop:train",
    "build_optimizer": "yeto.learners.torch.optim:build_optimizer", "lr_at": "yeto.learners.torch.optim:lr_at",
    "set_lr": "yeto.learners.torch.optim:set_lr",
    "apply_tuning": "yeto.learners.torch.tuning:apply_tuning",
    "trainable_parameters": "yeto.learners.torch.tuning:trainable_parameters"})
