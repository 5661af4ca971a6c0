"""plan_fleet end to end on values: budget and target modes, every rejection reason, infeasible budgets, round trips."""
import pytest

from yeto.schemas import parse
from yeto.schemas.commands import PlanFleet
from yeto.schemas.gpuspec import IslandSpec, parse_gpu
from yeto.schemas.plan import EXAMPLES, FleetPlanFailed, FleetPlanned
from yeto.services.planner.candidates import REASONS
from yeto.services.planner.catalog import Offering
from yeto.services.planner.logic import handle
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Quota, Signals

pytestmark = pytest.mark.timeout(60)


def off(cloud, region, itype, gpu, count, price, spot=None, vcpus=8.0):
    return Offering(cloud, region, itype, gpu, count, vcpus, 64.0, price, spot)


CATALOG = [
    off("aws", "us-east-2", "p5.48xlarge", "H100", 8, 55.04, 11.2543, vcpus=192.0),
    off("aws", "us-east-1", "p5.48xlarge", "H100", 8, 55.04, 17.6289, vcpus=192.0),
    off("gcp", "us-central1", "a3-highgpu-1g", "H100", 1, 5.38, 3.35),
    off("runpod", "CA", "1x_A100-80GB_SECURE", "A100-80GB", 1, 1.39, 1.39),
    off("lambda", "us-east-1", "gpu_8x_v100", "V100", 8, 6.32),
    off("lambda", "us-east-1", "gpu_1x_gh200", "GH200", 1, 2.29),
]


def test_budget_mode_maximises_tflops_and_prints_a_launch_line_that_parses_back():
    plan = plan_fleet(PlanRequest(model="qwen35-9b", budget=40.0), CATALOG, Signals())
    assert plan.feasible and plan.status == "OPTIMAL"
    assert plan.total_price_per_hour * 1.0 <= 40.0
    assert plan.islands_price_per_hour * 1.10 + 0.19 <= 40.0 + 1e-9
    assert parse_gpu(plan.gpu) == [IslandSpec(cloud=i["cloud"], gpu=i["gpu"], count=i["count"], nodes=i["nodes"],
                                              region=i["region"]) for i in plan.islands]
    assert plan.launch_command.startswith(f"yeto launch --model qwen35-9b --gpu {plan.gpu} ")
    d = plan.to_dict()
    for key in ("islands", "total_price_per_hour", "total_tflops", "binding", "rejected", "warnings", "launch_command"):
        assert key in d
    assert set(d["islands"][0]) >= {"cloud", "region", "instance_type", "gpu", "count", "price_per_hour", "tflops"}


def test_target_mode_reaches_the_target_at_least_cost():
    plan = plan_fleet(PlanRequest(model="qwen35-9b", flops=3000.0), CATALOG, Signals())
    assert plan.feasible and plan.total_tflops >= 3000.0
    # One spot p5 in us-east-2 (~3126 TFLOPs) is the cheapest way there.
    assert [i["instance_type"] for i in plan.islands] == ["p5.48xlarge"] and plan.islands[0]["region"] == "us-east-2"


def test_on_demand_and_qlora_flags_reach_the_plan_and_the_launch_line():
    plan = plan_fleet(PlanRequest(model="llama31-70b", budget=20.0, tuning="lora", base_quantization="nf4",
                                  spot=False), CATALOG, Signals())
    assert plan.feasible and not any(i["spot"] for i in plan.islands)
    assert "--base-quantization nf4" in plan.launch_command and "--on-demand" in plan.launch_command


def test_every_rejection_reason_is_reachable():
    catalog = CATALOG + [
        off("azure", "eastus", "Standard_ND96asr_v4", "A100", 8, 27.197, 10.88),
        off("aws", "eu-north-1", "p5.48xlarge", "H100", 8, 58.89, 28.31, vcpus=192.0),
        off("aws", "us-west-2", "p5.48xlarge", "H100", 8, 55.04, 12.69, vcpus=192.0),
        off("runpod", "US", "2x_H200_SECURE", "H200", 2, 7.0, 7.0),
        off("aws", "us-east-2", "p5.48xlarge-alt", "H100", 8, 60.0, 15.0, vcpus=192.0),
        off("vast", "US", "1x_MYSTERY", "X9000", 1, 0.5, 0.3),
        off("lambda", "us-east-1", "gpu_1x_a6000", "A6000", 1, 0.8),
        off("gcp", "us-east4", "a3-highgpu-1g", "H100", 1, 10.97, 2.5),
        off("aws", "us-east-1", "p4de.24xlarge", "A100-80GB", 8, 27.44705, None, vcpus=96.0),
    ]
    signals = Signals(quotas=(Quota("aws", "us-west-2", "p", "vcpus", limit=192, used=96),),
                      stock={("runpod", "H200"): 0})
    req = PlanRequest(model="llama31-70b", budget=30.0, clouds=("aws", "gcp", "runpod", "lambda", "vast"),
                      regions=("us-east-1", "us-east-2", "us-west-2", "eu-north-1", "CA", "US", "us-central1"),
                      exclude_regions=("eu-north-1",), max_nodes=1)
    plan = plan_fleet(req, catalog, signals)
    codes = {r["code"] for r in plan.rejected}
    amd = [off("runpod", "US", "8x_MI300X_SECURE", "MI300X", 8, 23.92)]     # QLoRA where bitsandbytes is not
    codes |= {r["code"] for r in plan_fleet(PlanRequest(model="llama31-70b", budget=30.0, base_quantization="nf4"),
                                            amd, signals).rejected}
    assert codes == set(REASONS), set(REASONS) - codes
    assert all(r["reason"] and r["shape"] for r in plan.rejected)


def test_a_budget_nothing_fits_names_the_cheapest_option():
    plan = plan_fleet(PlanRequest(model="qwen35-9b", budget=1.0), CATALOG, Signals())
    assert not plan.feasible
    assert "runpod:1xa100-80gb@CA" in plan.reason and "raise --budget-per-hour to at least 1.72" in plan.reason
    assert plan.cheapest["instance_type"] == "1x_A100-80GB_SECURE"


def test_hub_models_need_a_size_offline():
    with pytest.raises(ValueError, match="--weights-gb"):
        plan_fleet(PlanRequest(model="kimi-k3", budget=100.0), CATALOG, Signals())
    assert plan_fleet(PlanRequest(model="kimi-k3", weights_gb=2.0, budget=100.0), CATALOG, Signals()).feasible


def test_warnings_from_signals_reach_the_plan():
    plan = plan_fleet(PlanRequest(model="qwen35-9b", budget=40.0), CATALOG, Signals(warnings=("aws: assumed",)))
    assert plan.warnings == ("aws: assumed",)


def _fixed(req: PlanRequest):
    return plan_fleet(req, CATALOG, Signals())


def test_logic_answers_plan_fleet_with_an_event_derived_from_the_command():
    cmd = PlanFleet(id="cmd-1", run_id="r-1", request={"model": "qwen35-9b", "budget": 40.0})
    ev = handle(cmd, _fixed)
    assert isinstance(ev, FleetPlanned) and ev.causation_id == "cmd-1" and ev.run_id == "r-1"
    again = handle(cmd, _fixed)
    assert again.id == ev.id   # a redelivered command publishes the same event id (deduplicated)
    def strip(plan: dict) -> dict:
        return {k: v for k, v in plan.items() if k != "solve_seconds"}

    assert strip(again.plan) == strip(ev.plan)
    failed = handle(PlanFleet(id="cmd-2", run_id="r-1", request={"model": "qwen35-9b", "budget": 1.0}), _fixed)
    assert isinstance(failed, FleetPlanFailed) and "cheapest option" in failed.reason and failed.cheapest
    bad = handle(PlanFleet(id="cmd-3", request={"model": "qwen35-9b"}), _fixed)
    assert isinstance(bad, FleetPlanFailed) and "--budget" in bad.reason


def test_plan_events_round_trip_through_the_registry():
    for ex in EXAMPLES:
        assert parse(ex.model_dump_json()) == ex


def test_request_round_trips_through_the_command_dict_and_ignores_unknown_fields():
    req = PlanRequest(model="m", budget=3.0, clouds=("aws",), regions=("us-east-1",))
    assert PlanRequest.from_dict(req.to_dict() | {"from_the_future": 1}) == req
