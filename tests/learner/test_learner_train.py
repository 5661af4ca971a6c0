"""A tiny random-init causal LM trains with LoRA and with full tuning; LoRA init is identical across
processes from the shared seed; the diloco_sync array adapter round-trips parameters."""
from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from yeto.learners import accel
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.adapter import TorchArrays
from yeto.learners.torch.evaluate import evaluate
from yeto.learners.torch.loop import train
from yeto.learners.torch.model import load_model, load_tokenizer, resolve
from yeto.learners.torch.tuning import apply_tuning, state_hash, trainable_parameters

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny

pytestmark = pytest.mark.timeout(120)
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return learner_tiny.write_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def _tuned(model_dir: Path, recipe: TrainRecipe):
    source = resolve(str(model_dir))
    return apply_tuning(load_model(source), recipe), load_tokenizer(source)


@pytest.mark.parametrize("tuning", ["lora", "full"])
def test_training_lowers_the_heldout_loss(model_dir, tuning):
    recipe = TrainRecipe(model=str(model_dir), tuning=tuning, lr=3e-3, warmup_steps=5, max_steps=40,
                         micro_batch=4, seq_len=64, seed=1)
    model, tok = _tuned(model_dir, recipe)
    policy = accel.detect(prefer="cpu")
    heldout = list(itertools.islice(learner_tiny.packed_batches(
        tok, learner_tiny.chat_rows(40, seed=99), seq_len=64, micro_batch=4), 4))
    before = evaluate(model, heldout, accel=policy)
    batches = learner_tiny.packed_batches(tok, learner_tiny.chat_rows(200), seq_len=64, micro_batch=4)
    results = train(model, batches, recipe, accel=policy)
    after = evaluate(model, heldout, accel=policy)
    assert [r.step for r in results] == list(range(1, 41))
    assert all(r.tokens == 4 * 63 for r in results)
    assert after < 0.85 * before, (before, after)
    if tuning == "lora":   # only the adapters moved
        assert all("lora_" in name for name, _ in trainable_parameters(model))


def _hash_in_subprocess(model_dir: Path, seed: int, noise_seed: int) -> str:
    code = (f"import torch; torch.manual_seed({noise_seed}); torch.rand(97)\n"
            "from yeto.learners.torch.model import load_model, resolve\n"
            "from yeto.learners.lm_recipe import TrainRecipe\n"
            "from yeto.learners.torch.tuning import apply_tuning, state_hash\n"
            f"r = TrainRecipe(model={str(model_dir)!r}, seed={seed})\n"
            "print(state_hash(apply_tuning(load_model(resolve(r.model)), r)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_lora_init_is_identical_across_processes_from_the_shared_seed(model_dir):
    first = _hash_in_subprocess(model_dir, seed=5, noise_seed=1)
    assert first == _hash_in_subprocess(model_dir, seed=5, noise_seed=2)
    recipe = TrainRecipe(model=str(model_dir), seed=6)
    other, _ = _tuned(model_dir, recipe)
    assert state_hash(other) != first and len(first) == 64


def test_adapter_round_trips_parameters_through_numpy(model_dir):
    model, _ = _tuned(model_dir, TrainRecipe(model=str(model_dir), seed=3))
    arrays = TorchArrays.of(model)
    names = arrays.names()
    assert names == sorted(names) and names == [n for n, _ in trainable_parameters(model)]
    params = dict(model.named_parameters())
    first = names[0]
    assert arrays.shape(first) == tuple(params[first].shape) and arrays.dtype(first) == "float32"
    view = arrays.read(first)
    assert np.shares_memory(view, params[first].detach().numpy())   # CPU f32: no copy on the hot path
    rng = np.random.default_rng(0)
    values = {n: rng.standard_normal(arrays.shape(n)).astype(np.float32) for n in names}
    for n in names:
        arrays.write(n, values[n])
    for n in names:
        np.testing.assert_array_equal(arrays.read(n), values[n])
        np.testing.assert_array_equal(params[n].detach().numpy(), values[n])
    arrays.write(first, arrays.read(first))   # writing a view onto itself is a no-op, not a corruption
    np.testing.assert_array_equal(arrays.read(first), values[first])
    with pytest.raises(ValueError, match="shape"):
        arrays.write(first, np.zeros((1, 2), np.float32))


def test_adapter_uses_a_host_buffer_for_non_f32_parameters():
    param = torch.nn.Parameter(torch.arange(6, dtype=torch.bfloat16).view(2, 3))
    arrays = TorchArrays([("w", param)])
    assert arrays.dtype("w") == "bfloat16"
    np.testing.assert_array_equal(arrays.read("w"), np.arange(6, dtype=np.float32).reshape(2, 3))
    arrays.write("w", np.full((2, 3), 0.5, np.float32))
    assert param.dtype == torch.bfloat16 and torch.equal(param.detach(), torch.full((2, 3), 0.5, dtype=torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.timeout(120)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: checks the bf16 base, f32 adapters and pinned reads")
def test_cuda_lora_trains_under_bf16_autocast_and_adapter_reads_through_pinned_buffers(model_dir):
    from yeto.learners.torch import dist
    from yeto.learners.torch.build import build, resolve_accel
    recipe = TrainRecipe(model=str(model_dir), lr=3e-3, warmup_steps=2, max_steps=20, micro_batch=4, seq_len=64)
    policy = resolve_accel(recipe, local_rank=0, prefer="cuda")
    built = build(recipe, accel=policy, topology=dist.Topology())
    base = [p for n, p in built.model.named_parameters() if not p.requires_grad]
    assert base[0].dtype == torch.bfloat16 and base[0].device.type == "cuda"
    batches = learner_tiny.packed_batches(built.tokenizer, learner_tiny.chat_rows(200), seq_len=64, micro_batch=4)
    results = train(built.model, batches, recipe, accel=policy)
    assert results[-1].loss < results[0].loss
    arrays = TorchArrays.of(built.model)
    name = arrays.names()[0]
    np.testing.assert_array_equal(arrays.read(name), dict(built.model.named_parameters())[name].detach().cpu().numpy())
