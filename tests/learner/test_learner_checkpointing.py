"""Activation checkpointing is really done when on (each decoder layer runs twice per step, same losses as
without), `yeto launch --activation-checkpointing` reaches the learner, and "auto" follows the memory model's
rule with the memory model's formulas."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from yeto.cli.launch.command import build_launch
from yeto.cli.main import build_parser
from yeto.learners import accel as accel_policy
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch import checkpointing, dist
from yeto.learners.torch.build import build, resolve_accel
from yeto.learners.torch.evaluate import loss_sum
from yeto.learners.torch.loop import train
from yeto.schemas.memory_model import Workload, fits, per_gpu_need, shape_of

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return learner_tiny.write_model_dir(root / "model"), learner_tiny.write_chat_jsonl(root / "chat.jsonl", 60)


def _built(recipe: TrainRecipe):
    return build(recipe, accel=resolve_accel(recipe, local_rank=0, prefer="cpu"), topology=dist.Topology())


def _layer_calls(built, monkeypatch) -> int:
    """Calls of the decoder layers' MLP forward during one forward and backward pass (module hooks do not fire
    in the recompute, so the method itself is counted)."""
    calls = []
    mlp = type(built.model.get_base_model().model.layers[0].mlp)
    forward = mlp.forward
    monkeypatch.setattr(mlp, "forward", lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))
    batch = next(learner_tiny.packed_batches(built.tokenizer, learner_tiny.chat_rows(20), seq_len=32, micro_batch=2))
    built.wrapped.train()
    total, _ = loss_sum(built.wrapped, batch)
    total.backward()
    monkeypatch.undo()
    return len(calls)


def test_on_recomputes_every_layer_and_trains_exactly_like_off(material, monkeypatch):
    torch.set_num_threads(1)
    model_dir, _ = material
    runs = {}
    for mode in ("on", "off", "auto"):
        recipe = TrainRecipe(model=str(model_dir), lr=3e-3, warmup_steps=1, max_steps=3, micro_batch=2, seq_len=32,
                             activation_checkpointing=mode)
        built = _built(recipe)
        assert built.checkpointed == checkpointing.is_on(built.model) == (mode == "on")   # auto: off on the CPU
        assert _layer_calls(built, monkeypatch) == (4 if mode == "on" else 2)   # 2 layers, again in the backward
        data = learner_tiny.packed_batches(built.tokenizer, learner_tiny.chat_rows(50), seq_len=32, micro_batch=2)
        runs[mode] = [r.loss for r in train(built.model, data, recipe, accel=built.accel)]
    assert runs["on"] == pytest.approx(runs["off"], rel=1e-5) and runs["off"] == runs["auto"]


def test_the_launch_flag_reaches_the_learner(material):
    model_dir, data = material
    argv = ["launch", "--gpu", "local:1xcpu", "--model", str(model_dir), "--data", str(data), "--seq-len", "32",
            "--activation-checkpointing", "on"]
    train_dict = build_launch(build_parser().parse_args(argv), "r-ckpt", []).recipe["train"]
    assert train_dict["activation_checkpointing"] == "on"
    assert _built(TrainRecipe.from_dict(train_dict)).checkpointed


def test_auto_follows_the_memory_models_rule_and_formulas(material, monkeypatch):
    hidden, layers = shape_of(8e9)
    for checkpointed in (True, False):      # the learner's formula is the memory model's
        w = Workload(weights_gb=16, seq_len=4096, vocab=128_000, activation_checkpointing="on" if checkpointed else "off")
        learner = checkpointing.activation_bytes(tokens=4096, hidden=hidden, layers=layers, vocab=128_000,
                                                 checkpointed=checkpointed)
        assert per_gpu_need(w, 1).activations_gb == pytest.approx(learner / 1e9)
    small, big = Workload(weights_gb=1, seq_len=2048), Workload(weights_gb=140, seq_len=8192)
    assert fits(small, 1, 85.9) == (True, per_gpu_need(small, 1, checkpointed=False))    # room: no recompute
    ok, need = fits(big, 8, 85.9)
    assert ok and need.checkpointed and not fits(Workload(weights_gb=140, seq_len=8192, activation_checkpointing="off"),
                                                  8, 85.9)[0]
    # The learner on an accelerator: on when a step's activations would not fit what the device has left.
    model_dir, _ = material
    built = _built(TrainRecipe(model=str(model_dir), micro_batch=4, seq_len=512))
    gpu = accel_policy.Accel(kind="cuda", device=torch.device("cpu"), dist_backend="nccl", compute_dtype=torch.bfloat16)
    recipe = TrainRecipe(model=str(model_dir), micro_batch=4, seq_len=512)
    for free, wanted in ((10**12, False), (10**6, True)):
        monkeypatch.setattr(accel_policy, "free_memory_bytes", lambda _a, free=free: free)
        assert checkpointing.wanted(built.model, recipe, gpu) is wanted
