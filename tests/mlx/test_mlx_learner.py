"""The MLX learner computes what the torch learner does on one tiny Llama: its layout, loss and AdamW steps.

The same trainable tensors (names, shapes, dtypes, so one layout fingerprint and one run), the same loss, the same
AdamW steps; its process trains to the end with the torch learner's flags and lines."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from yeto.learners import accel
from yeto.learners.data import collate as torch_collate
from yeto.learners.data import iter_blocks
from yeto.learners.layout import TensorSpec, plan_layout
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.mlx import batches as mlx_batches
from yeto.learners.mlx import loop as mlx_loop
from yeto.learners.mlx.__main__ import main as mlx_main
from yeto.learners.mlx.adapter import MlxArrays
from yeto.learners.mlx.build import build as mlx_build
from yeto.learners.torch.adapter import TorchArrays
from yeto.learners.torch.evaluate import loss_sum
from yeto.learners.torch.loop import train as torch_train
from yeto.learners.torch.model import load_model, resolve
from yeto.learners.torch.tuning import apply_tuning

sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
import learner_tiny

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """A torch (peft) and an MLX model of one tiny Llama and recipe, their LoRA tensors set to the same values."""
    torch.set_num_threads(1)
    mat = learner_tiny.material(tmp_path_factory.mktemp("tiny"))
    recipe = TrainRecipe(model=str(mat["model"]), data=str(mat["data"]), lora_r=4, lora_alpha=8, seq_len=64,
                         micro_batch=2, lr=3e-3, warmup_steps=1, max_steps=3, clip_norm=0.5)
    torch_model = apply_tuning(load_model(resolve(recipe.model)), recipe)
    mlx_model, tokenizer = mlx_build(recipe)
    t, m = TorchArrays.of(torch_model), MlxArrays(mlx_model)
    rng = np.random.default_rng(1)
    for name in t.names():
        value = rng.normal(0, 0.05, t.shape(name)).astype(np.float32)
        t.write(name, value)
        m.write(name, value)
    blocks = list(iter_blocks(mlx_batches.data_spec(recipe), tokenizer, shard=0, num_shards=1))[:6]
    return dict(recipe=recipe, torch=torch_model, mlx=mlx_model, t=t, m=m, blocks=blocks, mat=mat)


def _fingerprint(arrays) -> str:
    return plan_layout([TensorSpec(n, arrays.shape(n), arrays.dtype(n)) for n in arrays.names()], 4).fingerprint


def test_mlx_island_declares_the_torch_islands_layout(twins):
    t, m = twins["t"], twins["m"]
    assert m.names() == t.names() and len(m.names()) == 28
    assert [m.shape(n) for n in m.names()] == [t.shape(n) for n in t.names()]
    assert {m.dtype(n) for n in m.names()} == {"float32"}
    assert _fingerprint(m) == _fingerprint(t)


def test_mlx_loss_equals_torch_loss_on_packed_documents(twins):
    blocks = twins["blocks"][:2]
    total, count = loss_sum(twins["torch"], torch_collate(blocks, attention="packed"))
    mlx_total, mlx_count = mlx_loop.loss_sum(twins["mlx"], mlx_batches.collate(blocks))
    assert int(mlx_count.item()) == count > 0
    assert mlx_total.item() == pytest.approx(float(total.detach()), rel=1e-5)


def test_mlx_adamw_steps_follow_torchs(twins):
    recipe, blocks = twins["recipe"], twins["blocks"]
    pairs = [blocks[i:i + 2] for i in range(0, 6, 2)]
    torch_results = torch_train(twins["torch"], iter([torch_collate(b, attention="packed") for b in pairs]), recipe,
                                accel=accel.detect(prefer="cpu"))
    mlx_results = mlx_loop.train(twins["mlx"], iter([mlx_batches.collate(b) for b in pairs]), recipe)
    assert [r.loss for r in mlx_results] == pytest.approx([r.loss for r in torch_results], rel=1e-4)
    t, m = twins["t"], twins["m"]
    for name in t.names():
        np.testing.assert_allclose(m.read(name), t.read(name), atol=2e-5, err_msg=name)


def test_mlx_learner_process_trains_to_the_end_without_sync(twins, tmp_path, capsys):
    recipe = twins["recipe"].replace(max_steps=30, lr=3e-3, warmup_steps=3, micro_batch=4)
    code = mlx_main(["--run-id", "r", "--learner", "learner-0", "--recipe", recipe.to_json(), "--no-sync",
                     "--eval-every", "30", "--log-format", "json"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    start = lines[0]
    assert (start["event"], start["backend"], start["tuning"], start["ranks"]) == ("start", "mlx", "lora", 1)
    assert 0 < start["trainable"] < start["parameters"]                # LoRA: the adapters only
    done = [x for x in lines if x["event"] == "done"]
    assert code == 0 and done and done[0]["steps"] == 30
    first = [x for x in lines if x["event"] == "step"][0]
    assert done[0]["heldout"] < first["loss"]
