"""The hardware policy as pure functions of (kind, capabilities): the Ascend NPU's device, collective backend,
dtype by generation, memory module and refusals are decided here without an NPU (docs/ASCEND.md), and the
edge on this machine (no torch_npu) refuses an NPU with what to install."""
from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest
import torch

from yeto.learners import accel
from yeto.learners.accel import Capabilities, Choice, policy

pytestmark = pytest.mark.timeout(60)
NPU = Capabilities(device_name="Ascend910B2", torch_npu=True)


@pytest.mark.parametrize("name, dtype", [
    ("Ascend910B2", torch.bfloat16), ("Ascend910B4", torch.bfloat16), ("Ascend910_9391", torch.bfloat16),
    ("Ascend910A", torch.float32), ("Ascend910ProB", torch.float32), ("Ascend910PremiumA", torch.float32),
    ("Ascend950", torch.float32), ("", torch.float32),
])
def test_npu_computes_in_bf16_only_on_generations_that_have_it(name, dtype):
    choice = policy("npu", Capabilities(device_name=name, torch_npu=True), local_rank=3)
    assert choice == Choice(kind="npu", device="npu:3", dist_backend="hccl", compute_dtype=dtype)


def test_generations_are_read_from_the_device_name_most_specific_prefix_first():
    assert accel.ascend_generation("Ascend910_9392") == ("910C", True, True)
    assert accel.ascend_generation("Ascend910B3") == ("910B", True, True)
    assert accel.ascend_generation("Ascend910ProB") == ("910", False, True)     # a first-generation 910, not a 910B
    assert accel.ascend_generation("Ascend310P3") == ("310", False, False)
    assert accel.ascend_generation("NVIDIA H100 80GB HBM3") is None


def test_cuda_and_cpu_choices_are_unchanged_by_the_npu_policy():
    assert policy("cuda", Capabilities(device_name="NVIDIA H100 80GB HBM3"), local_rank=1) == Choice(
        kind="cuda", device="cuda:1", dist_backend="nccl", compute_dtype=torch.bfloat16)
    assert policy("cpu", Capabilities(), local_rank=1) == Choice(
        kind="cpu", device="cpu", dist_backend="gloo", compute_dtype=torch.float32)


@pytest.mark.parametrize("kind, caps, says", [
    ("npu", Capabilities(device_name="Ascend910B2"), "needs torch_npu"),
    ("npu", Capabilities(device_name="Ascend310P3", torch_npu=True), "inference card"),
    ("tpu", Capabilities(), "unknown device kind 'tpu'"),
])
def test_a_device_that_cannot_train_is_refused_with_the_reason(kind, caps, says):
    assert says in accel.training_problem(kind, caps)
    with pytest.raises(ValueError, match=says):
        policy(kind, caps)


def test_cuda_only_paths_are_refused_on_npu_by_name_with_what_to_use_instead():
    assert "--base-quantization none" in accel.refusal("npu", "nf4")
    assert "NumPy" in accel.refusal("npu", "cupy") and "NumPy" in accel.refusal("cpu", "cupy")
    assert "SDPA" in accel.refusal("npu", "flash_attn")
    assert "foreach=True" in accel.refusal("npu", "fused_adamw")
    assert "--island-backend torch" in accel.refusal("npu", "megatron")
    assert all(accel.refusal("cuda", f) is None for f in ("nf4", "cupy", "flash_attn", "fused_adamw", "megatron"))
    assert accel.refusal("cpu", "nf4") is None          # bitsandbytes' CPU backend runs QLoRA (slowly)


def test_memory_is_asked_of_the_kinds_own_torch_module_and_sharding_follows_it():
    assert [accel.memory_module(k) for k in accel.KINDS] == ["cuda", "npu", None]
    gb = 10**9
    assert accel.must_shard("npu", param_bytes=30 * gb, free_bytes=64 * gb, tuning="full", world_size=8)
    assert not accel.must_shard("npu", param_bytes=30 * gb, free_bytes=64 * gb, tuning="lora", world_size=8)
    assert not accel.must_shard("npu", param_bytes=30 * gb, free_bytes=64 * gb, tuning="full", world_size=1)
    assert not accel.must_shard("cpu", param_bytes=30 * gb, free_bytes=1, tuning="full", world_size=8)


def test_an_f32_accelerator_runs_without_autocast():
    f32 = accel.Accel(kind="cuda", device=torch.device("cuda", 0), dist_backend="nccl", compute_dtype=torch.float32)
    assert type(accel.autocast(f32)).__name__ == "nullcontext"
    bf16 = accel.Accel(kind="cuda", device=torch.device("cuda", 0), dist_backend="nccl", compute_dtype=torch.bfloat16)
    with warnings.catch_warnings():     # torch warns that CUDA is absent here; the context is what is checked
        warnings.simplefilter("ignore")
        assert isinstance(accel.autocast(bf16), torch.autocast)


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed here")
def test_without_torch_npu_an_npu_is_refused_and_torch_npu_is_never_imported():
    assert accel.probe("npu") == Capabilities(torch_npu=False)
    with pytest.raises(ValueError, match=r"--device npu needs torch_npu.*docs/ASCEND.md.*--device cpu"):
        accel.detect(prefer="npu")
    accel.detect(prefer="cpu")
    assert "torch_npu" not in sys.modules
