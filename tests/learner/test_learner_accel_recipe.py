"""The hardware policy on this CPU machine, the recipe's JSON round trip and checks, the lr schedule."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch

from yeto.learners import accel
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.optim import lr_at

pytestmark = pytest.mark.timeout(60)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the CPU policy; a GPU is present")
def test_accel_picks_cpu_with_gloo_and_f32_when_no_accelerator():
    policy = accel.detect()
    assert (policy.kind, policy.device.type, policy.dist_backend, policy.compute_dtype) == \
        ("cpu", "cpu", "gloo", torch.float32)
    assert isinstance(accel.autocast(policy), contextlib.nullcontext)
    assert accel.weight_dtype(policy, tuning="lora") == torch.float32
    assert accel.free_memory_bytes(policy) > 0
    assert not accel.needs_sharding(policy, param_bytes=10**15, tuning="full", world_size=4)


def test_accel_cuda_policy_is_bf16_nccl_and_keeps_trained_weights_f32():
    policy = accel.Accel(kind="cuda", device=torch.device("cuda", 1), dist_backend="nccl",
                         compute_dtype=torch.bfloat16)
    assert accel.weight_dtype(policy, tuning="lora") == torch.bfloat16
    assert accel.weight_dtype(policy, tuning="full") == torch.float32
    with pytest.raises(ValueError, match="unknown device kind"):
        accel.detect(prefer="tpu")


def test_recipe_round_trips_through_json_and_names_unknown_fields():
    recipe = TrainRecipe(model="m", target_modules=("q_proj", "v_proj"), sync={"fragments": 8}, seed=7)
    again = TrainRecipe.from_json(recipe.to_json())
    assert again == recipe and again.target_modules == ("q_proj", "v_proj")
    with pytest.raises(ValueError, match="unknown recipe field.*lora_rank"):
        TrainRecipe.from_dict({"model": "m", "lora_rank": 8})
    with pytest.raises(ValueError, match="tuning 'qlora'"):
        TrainRecipe(model="m", tuning="qlora")
    with pytest.raises(ValueError, match="micro_batch must be at least 1"):
        TrainRecipe(model="m", micro_batch=0)


def test_schedule_warms_up_linearly_then_follows_cosine_to_the_floor_or_stays_constant():
    recipe = TrainRecipe(model="m", lr=1e-3, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert [lr_at(s, recipe) for s in (0, 4, 9)] == pytest.approx([1e-4, 5e-4, 1e-3])
    assert lr_at(10, recipe) == pytest.approx(1e-3)
    assert lr_at(60, recipe) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert lr_at(110, recipe) == pytest.approx(1e-4) and lr_at(500, recipe) == pytest.approx(1e-4)
    lrs = [lr_at(s, recipe) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    constant = recipe.replace(schedule="constant")
    assert {lr_at(s, constant) for s in range(10, 200)} == {1e-3}
    assert not math.isnan(lr_at(0, recipe.replace(warmup_steps=0)))


def test_a_resumed_replacement_warms_up_again_to_the_schedule():
    recipe = TrainRecipe(model="m", lr=1e-3, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert lr_at(60, recipe, resumed_at=60) == pytest.approx(lr_at(60, recipe) / 10)
    assert lr_at(64, recipe, resumed_at=60) == pytest.approx(lr_at(64, recipe) * 5 / 10)
    assert [lr_at(s, recipe, resumed_at=60) for s in (69, 70, 100)] == pytest.approx([lr_at(s, recipe) for s in (69, 70, 100)])
    assert lr_at(5, recipe, resumed_at=5) == lr_at(5, recipe), "inside the first warmup the schedule already warms up"
    constant = TrainRecipe(model="m", lr=1e-3, warmup_steps=10, schedule="constant")
    assert lr_at(40, constant, resumed_at=40) == pytest.approx(1e-4)
