"""The launcher checks a LaunchRun's recipe against the memory model (schemas/memory_model.py), not only the hard caps:
seq_len 131072 x micro_batch 8 is under every cap, yet a local CPU island would need far more memory than the machine
holds; it is refused with the numbers before anything is spawned. lora_r 4096 on a 135M model is not."""
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


def _over(train: dict, *, weights_gb: float | None = SMOL_GB, host_gb: float = 16.0, fleet=(SPEC,)) -> str | None:
    return over_memory(list(fleet), LaunchRecipe.upcast({"train": train}), weights_gb=weights_gb, host_memory_gb=host_gb)


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


@pytest.mark.parametrize("fleet", [[{**SPEC, "cloud": "aws", "gpu": "H100", "count": 8}], [{**SPEC, "gpu": "cuda"}]])
def test_only_cpu_islands_are_checked_here_and_an_unknown_size_is_not_refused(fleet):
    assert _over(LONG, fleet=fleet) is None
    assert _over(LONG, weights_gb=None) is None


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
