"""The planner never plans QLoRA (--base-quantization nf4) on GPUs whose islands get no bitsandbytes, and its
memory model keeps an NF4 base whole on every GPU (NF4 islands replicate it with DDP; FSDP shards bf16 only), as
it keeps any state whole under --shard ddp."""
import pytest

from yeto.schemas.memory_model import Workload, per_gpu_need
from yeto.services.planner.catalog import Offering
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals

pytestmark = pytest.mark.timeout(60)

CATALOG = [Offering("runpod", "US", "8x_MI300X_SECURE", "MI300X", 8, 96.0, 1024.0, 15.0, None),
           Offering("runpod", "US", "2x_H100_SECURE", "H100", 2, 32.0, 256.0, 6.0, None)]


def test_nf4_is_never_planned_on_amd_islands_and_bf16_is():
    bf16 = plan_fleet(PlanRequest(model="llama31-70b", budget=40.0), CATALOG, Signals())
    assert bf16.feasible and any(i["gpu"] == "MI300X" for i in bf16.islands)
    nf4 = plan_fleet(PlanRequest(model="llama31-70b", budget=40.0, base_quantization="nf4"), CATALOG, Signals())
    assert nf4.feasible and {i["gpu"] for i in nf4.islands} == {"H100"}
    assert "--base-quantization nf4" in nf4.launch_command
    assert [r["code"] for r in nf4.rejected if "MI300X" in r["shape"]] == ["no_nf4"]


def test_an_nf4_base_is_replicated_not_sharded():
    w = Workload(weights_gb=140, base_quantization="nf4")
    assert per_gpu_need(w, 2).state_gb == pytest.approx(per_gpu_need(w, 1).state_gb)
    bf16 = Workload(weights_gb=140)
    assert per_gpu_need(bf16, 2).state_gb == pytest.approx(per_gpu_need(bf16, 1).state_gb / 2)


def test_shard_ddp_replicates_the_state_and_fsdp_shards_it():
    ddp, fsdp = Workload(weights_gb=140, tuning="full", shard="ddp"), Workload(weights_gb=140, tuning="full", shard="fsdp")
    assert per_gpu_need(ddp, 8).state_gb == pytest.approx(8 * per_gpu_need(fsdp, 8).state_gb)
