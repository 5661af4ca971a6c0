"""The launcher checks a LaunchRun's recipe against the memory model (schemas/memory_model.py), not only the hard caps:
seq_len 131072 x micro_batch 8 is under every cap, yet a local CPU island would need far more memory than the machine
holds; it is refused with the numbers before anything is spawned. lora_r 4096 on a 135M model is not. Local CUDA
islands are checked against the free memory given for this machine's devices (this box has no GPU: the decision is
tested with numbers), cloud GPU islands against the GPU table's memory of their accelerator."""
from __future__ import annotations

import pytest

from test_security_limits_launch import SPEC, launcher_rejecting
from waiting import until
from yeto.learners.torch.tiny import write_model_dir
from yeto.schemas.commands import LaunchRun
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.subjects import event_subject
from yeto.services.launcher.memory_fit import FAR, over_memory

SMOL_GB = 0.27          # a 135M model's bf16 weights
LONG = {"seq_len": 131072, "micro_batch": 8}


def _over(train: dict, *, weights_gb: float | None = SMOL_GB, host_gb: float = 16.0, fleet=(SPEC,),
          cuda_gb: float | None = None) -> str | None:
    return over_memory(list(fleet), LaunchRecipe.upcast({"train": train}), weights_gb=weights_gb, host_memory_gb=host_gb,
                       cuda_memory_gb=cuda_gb)


def test_a_long_context_batch_on_a_cpu_island_is_refused_with_the_numbers():
    why = _over(LONG)
    assert why is not None and "seq_len 131072 x micro_batch 8" in why and "the 16.0 GB this machine holds" in why, why
    assert "lower --seq-len, --micro-batch or --lora-r" in why


def test_a_large_adapter_on_a_small_model_fits():
    assert _over({"lora_r": 4096}) is None
    assert _over({}) is None


def test_a_refusal_needs_a_need_far_over_the_machine():
    """The model is an estimate: a need between 1 and FAR times the machine's memory is left to the learner."""
    from yeto.schemas.memory_model import Workload, per_gpu_need
    need = per_gpu_need(Workload(weights_gb=SMOL_GB, lora_r=4096, seq_len=512, micro_batch=4), 1).total_gb
    assert _over({"lora_r": 4096}, host_gb=need / 1.5) is None
    assert _over({"lora_r": 4096}, host_gb=need / (FAR + 0.5)) is not None


CUDA = {**SPEC, "gpu": "cuda"}
EIGHT_B_GB = 16.0       # an 8B model's bf16 weights


def test_a_local_cuda_island_is_checked_against_its_devices_free_memory():
    """Given 24 GB free: a long-context batch is refused per GPU with what to change, the default recipe of a 135M
    model fits, full tuning of 8B on one 24 GB GPU is refused and fits on 80 GB free; unknown (no GPU): not checked."""
    why = _over(LONG, fleet=[CUDA], cuda_gb=24.0)
    assert why is not None and why.startswith("island 0 (local:1xcuda) would need ") and "per GPU on 1 GPU(s)" in why, why
    assert "seq_len 131072 x micro_batch 8" in why and "the 24.0 GB free on this machine's fullest CUDA device" in why
    assert "lower --seq-len, --micro-batch or --lora-r, use --base-quantization nf4, or free the GPU" in why
    assert _over({}, fleet=[CUDA], cuda_gb=24.0) is None
    full = {"tuning": "full", "seq_len": 2048}
    assert _over(full, weights_gb=EIGHT_B_GB, fleet=[CUDA], cuda_gb=24.0) is not None
    assert _over({"seq_len": 2048}, weights_gb=EIGHT_B_GB, fleet=[CUDA], cuda_gb=80.0) is None
    assert _over(LONG, fleet=[CUDA], cuda_gb=None) is None


def test_a_cloud_gpu_island_is_checked_against_its_accelerators_memory():
    """The GPU table's memory (schemas/gpu_table.py) on the island's nodes x count GPUs: full tuning of 8B does not fit
    one L4 (24 GiB) and fits eight H100s (sharded); the message names the island's entry and what to change."""
    full = {"tuning": "full", "seq_len": 2048}
    l4 = {**SPEC, "cloud": "aws", "gpu": "L4", "count": 1}
    why = _over(full, weights_gb=EIGHT_B_GB, fleet=[{**l4, "gpu": "H100", "count": 8}, l4])   # the first fits
    assert why is not None and why.startswith("island 1 (aws:1xl4) would need ") and "more than a L4 holds (26 GB" in why
    assert "add GPUs or nodes, or use --base-quantization nf4" in why, why
    assert _over(full, weights_gb=EIGHT_B_GB, fleet=[{**l4, "gpu": "H100", "count": 8}]) is None
    assert _over(LONG, fleet=[{**l4, "gpu": "H100", "count": 8}]) is not None, "1M tokens' logits fit no GPU"
    assert _over(LONG, fleet=[{**l4, "gpu": "TPU-V9"}]) is None, "an accelerator outside the table is not checked"


@pytest.mark.parametrize("fleet", [[{**SPEC, "cloud": "aws", "gpu": "H100", "count": 8}], [CUDA], [SPEC]])
def test_a_model_of_unknown_size_is_not_refused(fleet):
    assert _over(LONG, weights_gb=None, fleet=fleet, cuda_gb=24.0) is None


async def test_the_launcher_refuses_a_launch_whose_recipe_is_far_over_the_machines_memory(nats_server, tmp_path, run_id):
    model = write_model_dir(tmp_path / "model")      # its size comes from its safetensors' headers
    async with launcher_rejecting(nats_server, tmp_path, run_id) as (bus, rejected, changed):
        await bus.publish(LaunchRun(id=f"{run_id}-launch", run_id=run_id, source="test", fleet=[SPEC],
                                    recipe={"train": {"model": str(model), **LONG}}))
        await until(lambda: rejected, 60, "the launcher's rejection", changed=changed)
        reason = rejected[0].reason
        assert f"run {run_id} not launched: island 0 (local:1xcpu) would need" in reason, reason
        assert "seq_len 131072 x micro_batch 8" in reason and "GB this machine holds" in reason, reason
        assert await bus.last(event_subject(run_id, "RunLaunched")) is None
        assert not (tmp_path / "runs" / run_id).exists()


@pytest.mark.slow
def test_the_cuda_probe_reads_the_free_memory_of_this_machines_devices_or_none_without_one():
    """cuda_memory.cuda_free_gb in its child process: None where torch sees no CUDA device (this box), else the least
    free memory of the visible devices, which this process's torch agrees with."""
    import torch

    from yeto.services.launcher.cuda_memory import cuda_free_gb
    got = cuda_free_gb()
    if not torch.cuda.is_available():
        assert got is None
        return
    total = min(torch.cuda.mem_get_info(d)[1] for d in range(torch.cuda.device_count())) / 1e9
    assert got is not None and 0 < got <= total, (got, total)
