"""A region out of capacity, rehearsed through SkyPilot's door: the launcher service starts the island with its real
SkyPilot backend and the very `sky.Task` Yeto builds, the rehearsal's SkyApi refuses that task's region
(us-east-2) with SkyPilot's ResourcesUnavailableError, the launcher records OfferRefused, the planner service (on
the same real nats-server) answers with MoveIsland to the next-best offer of the same GPU shape (us-west-2 at
$12.69/hr), and the rehearsal starts the island's generation 1 there as a managed job in a namespace of its own.
`yeto status RUN` over a real tape of those events names the refusal and the move. And a run with a budget whose
8x A100 island every region of the catalog refuses in turn: moved to 8x H100, started as SkyPilot's job of that shape.

No head is rented and no learner trains here: the job in us-west-2 runs the island's real task, but the test's
nats-server is not the head's TLS stack the task is built to reach, so the test stops once the job is started.
test_cloud_rehearsal_replan.py goes on to the end through the head's own stack: the moved island trains and the
run finalizes."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rehearsal
import rehearsal_world
from waiting import until
from yeto.infra.bus import connect
from yeto.schemas.commands import LaunchRun
from yeto.services.launcher.backends.skypilot import SkyPilotBackend

sys.path.insert(0, str(Path(__file__).parents[1] / "planner"))
from replan_world import Collected, launcher_and_planner, no_cloud_credentials, status_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
RECIPE = {"train": {"model": "m", "data": "org/chat"}, "bus_url": "tls://203.0.113.7:4222"}
EAST = {"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True,
        "price_per_hour": 13.0}


def refuse(root: Path, regions: list[str]) -> None:
    with rehearsal.jobs.locked(root) as state:
        state["world"]["refuse_regions"] = regions


async def test_a_refused_region_moves_the_island_to_the_next_best_offer_through_skypilot(
        rehearsal_dir, fresh_nats, tmp_path, run_id, monkeypatch, capsys):
    refuse(rehearsal_dir, ["us-east-2"])
    no_cloud_credentials(tmp_path, monkeypatch)
    url, seen = fresh_nats.url, Collected()
    bus = await connect(url, name="test")
    events, changed = seen.events, seen.changed
    watch = await seen.watch(bus, run_id)

    def requested_again():
        return [e for e in events if e.type == "IslandRequested" and e.generation == 1]

    def west_job():
        return [j for j in rehearsal_world.record(rehearsal_dir)["jobs"].values()
                if j["name"].endswith("-island-0-g1")]
    try:
        async with launcher_and_planner(url, SkyPilotBackend(api=rehearsal.RehearsalSky(), max_age_s=0.2),
                                        tmp_path / "planner"):
            await bus.publish(LaunchRun(run_id=run_id, source="test", fleet=[EAST], recipe=RECIPE))
            await until(requested_again, 60, "the island's next generation requested elsewhere", changed=changed,
                        detail=lambda: f"seen {[e.type for e in events]}")
            await until(west_job, 60, "the rehearsal starting generation 1", changed=changed)
    finally:
        await watch.close()
        await bus.close()
    world = rehearsal_world.record(rehearsal_dir)
    refusal = next(e for e in events if e.type == "OfferRefused")
    assert (refusal.island, refusal.generation, refusal.region, refusal.cause) == (0, 0, "us-east-2", "capacity")
    assert "ResourcesUnavailableError" in refusal.reason
    assert world["refused"][0] == [f"yeto-{run_id}-island-0-g0", "us-east-2"]
    moved = requested_again()[0]
    assert (moved.spec["region"], moved.spec["gpu"], moved.spec["count"], moved.price_per_hour) == \
        ("us-west-2", "H100", 8, 12.6935)
    assert [j["name"] for j in world["jobs"].values()] == [f"yeto-{run_id}-island-0-g1"]    # never in us-east-2
    run_sh = (Path(west_job()[0]["dir"]) / "run.sh").read_text()
    assert "torchrun" in run_sh and " -m yeto.learners." in run_sh      # the island's own task, moved as it was
    status = status_of(tmp_path / "state", run_id, events, capsys)
    assert "island 0 gen 0: aws us-east-2 8xH100 refused (capacity)" in status
    assert "      moved to aws us-west-2 8xH100 as gen 1" in status


async def test_an_island_whose_every_region_refuses_its_gpu_type_moves_to_another_within_the_runs_budget(
        rehearsal_dir, fresh_nats, tmp_path, run_id, monkeypatch, capsys):
    """A run launched with a $14/hr budget on aws: its 8x A100-80GB island is refused in eu-central-1, then in
    us-east-1 and us-west-2 (every region of the fixture catalog's p4de.24xlarge) as the planner moves it there; with
    no A100 offer left, it moves to 8x H100 in us-east-2 ($11.2543/hr: more TFLOPs, within the budget), and
    the rehearsal starts that generation as SkyPilot's managed job of the new shape (8 ranks of H100)."""
    refuse(rehearsal_dir, ["eu-central-1", "us-east-1", "us-west-2"])
    no_cloud_credentials(tmp_path, monkeypatch)
    url, seen = fresh_nats.url, Collected()
    bus = await connect(url, name="test")
    watch = await seen.watch(bus, run_id)
    a100 = {"cloud": "aws", "gpu": "A100-80GB", "count": 8, "nodes": 1, "region": "eu-central-1", "spot": True,
            "price_per_hour": 8.0274}
    recipe = {**RECIPE, "recipe_version": 2, "config": {"clouds": "aws", "weights_gb": 18.0},
              "prices": {"head_price_per_hour": 0.19, "budget_per_hour": 14.0, "price_margin": 0.1}}

    def h100():
        return [e for e in seen.of("IslandRequested") if e.spec.get("gpu") == "H100"]

    def h100_job():
        return [j for j in rehearsal_world.record(rehearsal_dir)["jobs"].values() if h100() and
                j["name"].endswith(f"-island-0-g{h100()[0].generation}")]
    try:
        async with launcher_and_planner(url, SkyPilotBackend(api=rehearsal.RehearsalSky(), max_age_s=0.2),
                                        tmp_path / "planner"):
            await bus.publish(LaunchRun(run_id=run_id, source="test", fleet=[a100], recipe=recipe))
            await until(h100, 90, "the island requested on H100", changed=seen.changed,
                        detail=lambda: f"seen {[(e.type, getattr(e, 'region', '')) for e in seen.events]}")
            await until(h100_job, 60, "the rehearsal starting the H100 generation", changed=seen.changed)
    finally:
        await watch.close()
        await bus.close()
    refused = [(e.generation, e.region, e.gpu) for e in seen.of("OfferRefused")]
    assert refused == [(0, "eu-central-1", "A100-80GB"), (1, "us-east-1", "A100-80GB"), (2, "us-west-2", "A100-80GB")]
    moved = h100()[0]
    assert (moved.generation, moved.spec["region"], moved.spec["count"], moved.price_per_hour) == (3, "us-east-2", 8, 11.2543)
    assert "another region, GPU type; the fleet's $11.25/hr + 10% margin + head $0.190/hr = $12.57/hr within the " \
           "run's --budget-per-hour $14.00" in moved.reason
    world = rehearsal_world.record(rehearsal_dir)
    assert [j["name"] for j in world["jobs"].values()] == [f"yeto-{run_id}-island-0-g3"]     # no A100 job ever ran
    run_sh = (Path(h100_job()[0]["dir"]) / "run.sh").read_text()
    assert "--nproc-per-node 8" in run_sh and " -m yeto.learners." in run_sh
    status = status_of(tmp_path / "state", run_id, seen.events, capsys)
    assert "island 0 gen 2: aws us-west-2 8xA100-80GB refused (capacity)" in status
    assert "      moved to aws us-east-2 8xH100 as gen 3" in status
