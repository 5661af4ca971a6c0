"""A refused island's move within the run's budget (pure): the bounds the launch records (--budget-per-hour,
--price-margin, or the launched fleet's price), the next-best offer on another cloud or of another GPU type when the
same shape elsewhere is over them, and the moved island's start carrying its new shape; then, on a real nats-server
with the launcher and the planner as services, a budgeted run's island moved to another cloud."""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from functools import reduce
from pathlib import Path

import pytest

from replan_world import Collected, launcher_and_planner, no_cloud_credentials, status_of
from test_planner_replan import RefusingCloud
from waiting import until
from yeto.infra.bus import connect
from yeto.schemas.commands import LaunchRun
from yeto.schemas.fleet import IslandRequested, RunLaunched, StartIsland
from yeto.schemas.offers import MoveIsland, OfferRefused, ReplanFailed
from yeto.services.launcher.logic import decide
from yeto.services.launcher.state import evolve
from yeto.services.planner import wiring
from yeto.services.planner.catalog import Offering
from yeto.services.planner.move_budget import bounds_of
from yeto.services.planner.replan import Replacement, Unplaceable, replacement
from yeto.services.planner.signals import Signals

NOW = datetime(2026, 12, 5, 2, 0, tzinfo=timezone.utc)
H100 = [Offering("aws", r, "p5.48xlarge", "H100", 8, 192.0, 2048.0, 55.04, s)
        for r, s in (("us-east-2", 11.25), ("us-west-2", 12.69), ("us-east-1", 17.63))]
GCP_H100 = Offering("gcp", "us-central1", "a3-highgpu-8g", "H100", 8, 208.0, 1872.0, 88.25, 12.10)
H200 = Offering("aws", "us-east-1", "p5e.48xlarge", "H200", 8, 192.0, 2048.0, 60.0, 12.00)
A100 = Offering("aws", "us-east-1", "p4de.24xlarge", "A100-80GB", 8, 96.0, 1152.0, 40.97, 5.00)   # cheaper, slower
SPEC = {"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True}
TRAIN = {"model": "m", "data": "org/chat", "tuning": "lora", "seq_len": 2048, "micro_batch": 1}


def launched(prices: dict, config: dict, fleet: list[dict] | None = None) -> RunLaunched:
    fleet = fleet or [{**SPEC, "price_per_hour": 11.25}, {**SPEC, "region": "us-east-1", "price_per_hour": 11.25}]
    recipe = {"recipe_version": 2, "train": TRAIN, "prices": prices, "config": config, "bus_url": "tls://203.0.113.7:4222"}
    return RunLaunched(run_id="r1", source="launcher", fleet=fleet, recipe=recipe)


def refused(region: str = "us-east-2", price: float = 11.25, generation: int = 0) -> OfferRefused:
    return OfferRefused(run_id="r1", source="launcher", island=0, generation=generation, cloud="aws", region=region,
                        gpu="H100", count=8, spot=True, price_per_hour=price, cause="capacity",
                        reason="InsufficientInstanceCapacity", ts=NOW)


# the planner picked the fleet under $26/hr: (11.25 + x) x 1.1 + 0.19 <= 26 leaves island 0 $12.21/hr
PLANNED = launched({"head_price_per_hour": 0.19, "budget_per_hour": 26.0, "price_margin": 0.10},
                   {"gpu": None, "clouds": "aws,gcp", "weights_gb": 18.0})


def test_the_budget_the_launch_recorded_bounds_the_fleet_after_the_move():
    b = bounds_of(PLANNED)
    assert b is not None and b.budget == 26.0 and b.clouds == ("aws", "gcp")
    assert b.room(0) == pytest.approx((26.0 - 0.19) / 1.1 - 11.25)
    named = bounds_of(launched({"head_price_per_hour": 0.19, "price_margin": 0.10}, {"gpu": "aws:8xh100@us-east-2"}))
    assert named is not None and named.budget is None and named.clouds == ("aws",)        # the fleet's own clouds
    assert named.room(0) == pytest.approx(22.5 * 1.1 - 11.25)                              # launched x (1 + margin)
    assert bounds_of(launched({"head_price_per_hour": 0.19}, {})) is None                  # a tape from before
    moved = wiring.evolve(wiring.evolve(wiring.State(), PLANNED), IslandRequested(
        run_id="r1", source="launcher", island=1, generation=1, spec=SPEC, price_per_hour=12.0))
    assert moved.bounds("r1").islands == (11.25, 12.0)


def test_when_the_same_shape_elsewhere_is_over_the_budget_the_only_offer_within_it_on_another_cloud_takes_it():
    b = bounds_of(PLANNED)
    got = replacement(refused(), [*H100, GCP_H100], Signals(), b)
    assert isinstance(got, Replacement) and (got.offering.cloud, got.offering.region, got.price) == \
        ("gcp", "us-central1", 12.10)
    # the same run with gcp not among its clouds: nothing within the budget is left, and the reason says its numbers
    aws_only = bounds_of(launched(PLANNED.recipe["prices"], {"clouds": "aws", "weights_gb": 18.0}))
    none = replacement(refused(), [*H100, GCP_H100], Signals(), aws_only)
    assert isinstance(none, Unplaceable)
    assert none.reason == ("the cheapest other offer that holds island 0, aws:1x8xH100@us-west-2 at $12.69/hr, would "
                           "take the fleet's $23.94/hr + 10% margin + head $0.190/hr = $26.52/hr over the run's "
                           "--budget-per-hour $26.00")
    assert none.advice.startswith("launch again with --gpu aws:8xh100@us-west-2 to pay $12.69/hr for it")
    # the run's --regions and --exclude-regions hold for the move too
    roomy = {"head_price_per_hour": 0.19, "budget_per_hour": 40.0, "price_margin": 0.10}
    not_west = bounds_of(launched(roomy, {"clouds": "aws", "exclude_regions": "us-west-2", "weights_gb": 18.0}))
    assert replacement(refused(), H100, Signals(), not_west).offering.region == "us-east-1"
    only_west = bounds_of(launched(roomy, {"regions": "us-west-2,us-east-2", "weights_gb": 18.0}))
    assert replacement(refused(), [*H100, GCP_H100], Signals(), only_west).offering.region == "us-west-2"


def test_when_no_offer_of_the_shape_fits_another_gpu_type_that_holds_the_model_at_its_tflops_takes_it():
    b = bounds_of(PLANNED)
    got = replacement(refused(), [*H100, H200, A100], Signals(), b)
    assert isinstance(got, Replacement) and (got.offering.gpu, got.offering.count, got.price) == ("H200", 8, 12.00)
    assert got.spec(1) == {"cloud": "aws", "gpu": "H200", "count": 8, "nodes": 1, "region": "us-east-1", "spot": True}
    # the slower A100s, though cheaper, never take an H100 island's place
    assert isinstance(replacement(refused(), [*H100, A100], Signals(), b), Unplaceable)
    # the same shape is preferred to a cheaper other one while it fits the budget
    cheap_west = [Offering("aws", "us-west-2", "p5.48xlarge", "H100", 8, 192.0, 2048.0, 55.04, 12.05)]
    assert replacement(refused(), [*H100[:1], *cheap_west, H200], Signals(), b).offering.gpu == "H100"
    # a model whose size the tape does not know: only the same shape is known to hold it
    unknown = bounds_of(launched(PLANNED.recipe["prices"], {"clouds": "aws"}))
    none = replacement(refused(), [*H100, H200], Signals(), unknown)
    assert isinstance(none, Unplaceable) and none.reason.startswith("the cheapest other offer that holds island 0, "
                                                                    "aws:1x8xH100@us-west-2")


def test_a_run_that_recorded_no_budget_keeps_the_same_shape_on_its_cloud_within_the_refused_price_and_ten_percent():
    assert replacement(refused(price=12.0), [*H100, GCP_H100, H200], Signals(), None).offering.region == "us-west-2"
    old = replacement(refused(price=11.0), [*H100, GCP_H100, H200], Signals(), None)
    assert isinstance(old, Unplaceable) and "costs more than the refused $11.00/hr + 10%" in old.reason


def test_the_move_says_what_changed_and_the_budget_and_the_launcher_starts_the_new_shape():
    state = wiring.evolve(wiring.State(), PLANNED)
    move = wiring.move_island(refused(), [*H100, H200], Signals(), state.bounds("r1"))
    assert isinstance(move, MoveIsland) and move.spec["gpu"] == "H200" and move.price_per_hour == 12.0
    assert move.reason == ("aws:1x8xh100@us-east-2 refused (capacity); next-best offer aws:1x8xh200@us-east-1 "
                           "(p5e.48xlarge) at $12.00/hr, another region, GPU type; the fleet's $23.25/hr + 10% margin "
                           "+ head $0.190/hr = $25.77/hr within the run's --budget-per-hour $26.00")
    failed = wiring.move_island(refused(), H100, Signals(), state.bounds("r1"))
    assert isinstance(failed, ReplanFailed) and "over the run's --budget-per-hour $26.00" in failed.reason
    # the launcher starts generation 1 with the new shape: its StartIsland's spec is what the backend rents and
    # the ranks it runs (sky_tasks.island_task: accelerators {gpu: count}, torchrun --nproc-per-node count)
    start = LaunchRun(id="L", run_id="r1", fleet=PLANNED.fleet, recipe=PLANNED.recipe)
    out = [i.msg for i in decide({}, start, NOW)]
    launcher = reduce(evolve, [m for m in out if not isinstance(m, StartIsland)], {})
    moved = [i.msg for i in decide(launcher, move, NOW)]
    assert [type(m).__name__ for m in moved] == ["StartIsland", "IslandRequested"]
    assert all((m.generation, m.spec["gpu"], m.spec["count"], m.price_per_hour) == (1, "H200", 8, 12.0) for m in moved)
    assert moved[1].reason == move.reason       # on the tape with the move, for `yeto status`


def test_a_moved_island_of_another_shape_is_rented_and_run_as_that_shape(tmp_path):
    """What the launcher's SkyPilot backend builds from the moved generation's StartIsland (as effects.py does): the
    new GPUs, nodes and ranks; --micro-batch stays per GPU (the screening sized it for the new GPUs)."""
    from yeto.services.launcher.backends.base import IslandLaunch
    from yeto.services.launcher.backends.sky_tasks import island_task

    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    cheap_h200 = [Offering("aws", "us-east-1", "p5e.48xlarge", "H200", 4, 96.0, 1024.0, 30.0, 6.00),
                  Offering("aws", "us-east-1", "p5e.48xlarge", "H200", 8, 192.0, 2048.0, 60.0, 12.00)]
    refused_2x = refused().model_copy(update={"nodes": 2, "count": 4, "price_per_hour": 11.25})
    state = wiring.evolve(wiring.State(), launched(PLANNED.recipe["prices"], PLANNED.recipe["config"],
                                                  [{**SPEC, "count": 4, "nodes": 2, "price_per_hour": 11.25}]))
    move = wiring.move_island(refused_2x, cheap_h200, Signals(), state.bounds("r1"))
    # 2 nodes x 4 H100 -> 1 node x 8 H200 (4 H200 would train at half the TFLOPs)
    assert isinstance(move, MoveIsland) and (move.spec["gpu"], move.spec["count"], move.spec["nodes"]) == ("H200", 8, 1)
    assert "another region, GPU type, GPUs;" in move.reason
    recipe = {**PLANNED.recipe, "train": {**TRAIN, "data": str(data), "micro_batch": 2}}
    start = StartIsland(run_id="r1", source="launcher", island=0, generation=1, spec=move.spec, recipe=recipe,
                        num_islands=2, price_per_hour=move.price_per_hour)
    task = island_task(IslandLaunch(run_id=start.run_id, island=start.island, generation=start.generation,
                                    spec=start.spec, recipe=start.recipe, num_islands=start.num_islands,
                                    nats_url="tls://head:4222", start_step=start.start_step))
    (res,) = task.resources
    assert res.accelerators == {"H200": 8} and res.region == "us-east-1" and task.num_nodes == 1
    assert "--nproc-per-node 8" in task.run
    assert '"micro_batch": 2' in task.envs["YETO_RECIPE"]


@pytest.mark.slow
async def test_on_a_real_bus_a_budgeted_run_moves_its_island_to_another_cloud_and_status_says_the_bound(
        fresh_nats, tmp_path, run_id, monkeypatch, capsys):
    """The launcher and the planner as services: the run's RunLaunched carries its budget ($10/hr, --clouds aws,gcp);
    us-east-2 refuses the aws 1x H100 island; aws's other 1x H100 (eu-west-2, $8.94/hr on demand) would take the fleet
    over the budget, gcp's us-central1 (a3-highgpu-1g with its GPU, $5.38/hr) keeps it within: generation 1 starts
    there."""
    no_cloud_credentials(tmp_path, monkeypatch)
    url, seen = fresh_nats.url, Collected()
    bus = await connect(url, name="test")
    watch = await seen.watch(bus, run_id)
    cloud = RefusingCloud()
    recipe = launched({"head_price_per_hour": 0.19, "budget_per_hour": 10.0, "price_margin": 0.10},
                      {"clouds": "aws,gcp", "weights_gb": 18.0}).recipe
    try:
        async with launcher_and_planner(url, cloud, tmp_path / "planner"):
            fleet = [{"cloud": "aws", "gpu": "H100", "count": 1, "nodes": 1, "region": "us-east-2", "spot": False,
                      "price_per_hour": 6.88}]
            await bus.publish(LaunchRun(run_id=run_id, source="test", fleet=fleet, recipe=recipe))
            # up on the new offer: the stand-in started it (IslandRequested alone may land before the start)
            await until(lambda: [e for e in seen.of("IslandReplaced") if e.generation == 1], 90, "the moved island up",
                        changed=seen.changed, detail=lambda: f"seen {[e.type for e in seen.events]}")
    finally:
        await watch.close()
        await bus.close()
    moved = next(e for e in seen.of("IslandRequested") if e.generation == 1)
    assert (moved.spec["cloud"], moved.spec["region"], moved.spec["gpu"], moved.spec["count"]) == \
        ("gcp", "us-central1", "H100", 1)
    assert moved.reason.endswith("another cloud, region; the fleet's $5.38/hr + 10% margin + head $0.190/hr = "
                                 "$6.11/hr within the run's --budget-per-hour $10.00"), moved.reason
    assert (0, 1, "us-central1") in cloud.started
    status = status_of(tmp_path / "state", run_id, seen.events, capsys)
    assert "      moved to gcp us-central1 1xH100 as gen 1" in status
    assert "another cloud, region; the fleet's $5.38/hr + 10% margin + head $0.190/hr = $6.11/hr within the run's " \
           "--budget-per-hour $10.00" in status


@pytest.mark.slow       # two launches' data checks: ~20 s on the 2-core box
def test_yeto_launch_records_what_the_move_keeps_to(tmp_path):
    """The LaunchRun `yeto launch` builds carries the budget, the margin, the clouds and the model's size; the
    planner's bounds read them back from its RunLaunched."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
    from learner_tiny import write_chat_jsonl, write_model_dir
    from yeto.cli.launch.command import build_launch
    from yeto.cli.main import build_parser

    model, data = write_model_dir(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl", 40)
    common = ["launch", "--model", str(model), "--data", str(data), "--seq-len", "64", "--weights-gb", "18"]
    planned = build_parser().parse_args([*common, "--budget-per-hour", "26", "--price-margin", "0.2", "--clouds", "aws,gcp"])
    named = build_parser().parse_args([*common, "--gpu", "aws:8xh100@us-east-2"])
    got = []
    for args in (planned, named):
        cmd = build_launch(args, "r-bounds", [{**SPEC, "price_per_hour": 11.25}])
        b = bounds_of(RunLaunched(run_id="r-bounds", source="launcher", fleet=cmd.fleet, recipe=cmd.recipe))
        assert b is not None and b.workload is not None
        got.append((b.budget, b.margin, b.clouds, b.head_price, b.workload["weights_gb"], b.workload["seq_len"]))
    assert got == [(26.0, 0.2, ("aws", "gcp"), 0.19, 18.0, 64), (None, 0.1, ("aws",), 0.19, 18.0, 64)]
