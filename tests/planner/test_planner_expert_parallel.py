"""The fleet search sizes an MoE's islands with the expert-parallel memory model (services/planner/expert_memory.py)
when they run `--island-backend megatron`: Mixtral-8x7B, far too big for one GPU, is placed on the islands whose
GPUs hold it as EP ranks, GPUs that would hold it only FSDP-sharded are rejected, and `yeto shape` reads the
model's config.json for it."""
from __future__ import annotations

import json

import pytest

from yeto.cli.main import main
from yeto.schemas.memory_model import Workload
from yeto.services.planner.catalog import FIXTURE_DIR, Offering
from yeto.services.planner.expert_memory import expert_parallel_need, island_fit, moe_split
from yeto.services.planner.gpus import GPUS
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals

pytestmark = pytest.mark.timeout(60)
MIXTRAL_8X7B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}
# On-demand prices of a past day (AWS us-east-1): p5e (8x H200) and p5 (8x H100).
H200 = Offering("aws", "us-east-1", "p5e.48xlarge", "H200", 8, 192.0, 2048.0, 39.8, None)
H100 = Offering("aws", "us-east-1", "p5.48xlarge", "H100", 8, 192.0, 2048.0, 31.5, None)
THREE = Offering("aws", "us-east-1", "made-up.3gpu", "H200", 3, 96.0, 1024.0, 15.0, None)


def request(**kw) -> PlanRequest:
    return PlanRequest(**{"model": "mixtral-8x7b-dir", "budget": 200.0, "tuning": "full", "seq_len": 2048,
                          "head_memory_gb": 16384, "spot": False, "moe": MIXTRAL_8X7B, **kw})


def test_an_moe_too_big_for_one_gpu_is_placed_where_expert_parallelism_fits():
    split = moe_split(MIXTRAL_8X7B)
    w = Workload(weights_gb=split.total * 2 / 1e9, tuning="full", seq_len=2048)
    assert island_fit(w, split, 1, GPUS["H200"].memory_gb)[0] is False          # 752 GB on one GPU
    plan = plan_fleet(request(), [H200, H100], Signals())
    assert plan.feasible and {(i["gpu"], i["count"] * i["nodes"]) for i in plan.islands} == {("H200", 8)}
    ep8 = expert_parallel_need(split, 8, w).total_gb
    assert all(i["memory_per_gpu_gb"] == round(ep8, 2) for i in plan.islands)
    assert "--island-backend megatron" in plan.launch_command and "--tuning full" in plan.launch_command
    h100 = [r["reason"] for r in plan.rejected if "h100" in r["shape"]]
    assert h100 == [f"model does not fit: needs {ep8:.1f} GB per GPU on 1x8 GPUs as 8 expert-parallel ranks, "
                    f"a H100 holds {GPUS['H100'].memory_gb * 0.95:.1f} GB usable"]


def test_the_dense_model_would_have_placed_gpus_an_expert_parallel_island_cannot_use():
    dense = plan_fleet(request(moe=None, weights_gb=moe_split(MIXTRAL_8X7B).total * 2 / 1e9), [H100], Signals())
    assert dense.feasible and {i["nodes"] for i in dense.islands} == {2}      # 16 H100s, FSDP-sharded
    ep = plan_fleet(request(), [H100], Signals())
    assert not ep.feasible and [r["code"] for r in ep.rejected] == ["memory"]   # 8 experts split over 8 at most


def test_gpus_the_experts_do_not_split_over_are_rejected_saying_so():
    plan = plan_fleet(request(), [THREE, H200], Signals())
    assert [r["reason"] for r in plan.rejected if "3xh200" in r["shape"]] == [
        "model does not fit: its 8 experts split evenly over none of [3, 6, 12, 24] GPUs"]


def test_the_moe_config_travels_with_the_request_and_is_checked_on_arrival():
    assert PlanRequest.from_dict(request().to_dict()) == request()        # the PlanFleet command carries it
    with pytest.raises(ValueError, match="--tuning full"):
        request(tuning="lora")
    with pytest.raises(ValueError, match="not a Mixtral-style MoE config: no num_local_experts"):
        request(moe={k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"})


def test_yeto_shape_plans_expert_parallel_islands_from_the_models_config(tmp_path, capsys):
    half = {**MIXTRAL_8X7B, "num_hidden_layers": 16}        # Mixtral's shape with half its layers: 23.5B parameters
    model = tmp_path / "mixtral"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "mixtral", **half}))
    argv = ["--state-dir", str(tmp_path / "state"), "shape", "--model", str(model), "--budget-per-hour", "200",
            "--tuning", "full", "--seq-len", "2048", "--on-demand", "--catalog-dir", str(FIXTURE_DIR),
            "--clouds", "aws", "--head-memory-gb", "16384", "--island-backend", "megatron", "--json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    w = Workload(weights_gb=moe_split(half).total * 2 / 1e9, tuning="full", seq_len=2048)
    assert plan["islands"] and all(i["memory_per_gpu_gb"] == round(
        expert_parallel_need(moe_split(half), i["count"] * i["nodes"], w).total_gb, 2) for i in plan["islands"])
    assert "--island-backend megatron" in plan["launch_command"]
    assert main([*argv, "--model", str(tmp_path)]) == 2
    assert "is not a local model directory with one" in capsys.readouterr().err
