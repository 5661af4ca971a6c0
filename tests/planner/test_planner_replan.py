"""A refused island re-planned: the next-best offer of its GPU shape (pure), and the whole loop on a real nats-server
with the launcher and the planner as services: a stand-in provisioning refuses one region, the launcher records the
refusal, the planner (started after it) answers with MoveIsland, and the island comes up in the next-best region."""
from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import datetime, timezone
from functools import reduce
from types import SimpleNamespace

import pytest

from replan_world import Collected, no_cloud_credentials, status_of
from waiting import until
from yeto.cli.main import main
from yeto.infra.bus import connect
from yeto.infra.runner import run_service
from yeto.schemas.commands import LaunchRun
from yeto.schemas.fleet import IslandRequested, IslandUp, RunLaunched, StartIsland
from yeto.schemas.offers import MoveIsland, OfferRefused
from yeto.services.launcher import wiring as launcher_wiring
from yeto.services.launcher.backends.base import IslandLaunch, IslandRef, IslandStatus
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.logic import decide
from yeto.services.launcher.state import evolve
from yeto.services.planner import wiring as planner_wiring
from yeto.services.planner.catalog import Offering
from yeto.services.planner.refusals import with_refusals
from yeto.services.planner.replan import Replacement, replacement
from yeto.services.planner.signals import Quota, Signals

pytestmark = [pytest.mark.timeout(120)]
RECIPE = {"train": {"model": "m", "data": "org/chat"}, "bus_url": "tls://203.0.113.7:4222"}
P5 = [Offering("aws", r, "p5.48xlarge", "H100", 8, 192.0, 2048.0, 55.04, s)
      for r, s in (("us-east-2", 11.25), ("us-west-2", 12.69), ("us-east-1", 17.63), ("eu-north-1", 28.32))]
NOW = datetime(2026, 12, 5, 2, 0, tzinfo=timezone.utc)


def refused(region: str, price: float = 13.0, generation: int = 0) -> OfferRefused:
    return OfferRefused(run_id="r1", source="launcher", island=0, generation=generation, cloud="aws", region=region,
                        gpu="H100", count=8, spot=True, price_per_hour=price, cause="capacity",
                        reason="InsufficientInstanceCapacity", ts=NOW)


def test_the_next_best_offer_is_the_same_shape_elsewhere_within_the_refused_price():
    got = replacement(refused("us-east-2"), P5, Signals())
    assert isinstance(got, Replacement) and got.offering.region == "us-west-2" and got.price == 12.69
    assert got.spec(1) == {"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-west-2", "spot": True}
    both = with_refusals(Signals(), [refused("us-east-2"), refused("us-west-2", generation=1)], NOW)
    twice = replacement(refused("us-west-2", generation=1), P5, both)
    assert twice.reason == (
        "the cheapest other aws offer of 1x8xH100, us-east-1 at $17.63/hr, costs more than the refused $13.00/hr + 10%")
    assert "--exclude-regions us-east-2,us-west-2 " in twice.advice         # every region that refused the shape
    no_room = Signals(quotas=(Quota("aws", "us-west-2", "p", "vcpus", limit=96.0),))
    got = replacement(refused("us-east-2", price=20.0), P5, no_room)
    assert isinstance(got, Replacement) and got.offering.region == "us-east-1"       # us-west-2's quota is spent
    assert replacement(refused("us-east-2"), P5[:1], Signals()).reason.startswith("no other aws offer of 1x8xH100")


@dataclasses.dataclass
class RefusingCloud:
    """A stand-in provisioning behind the launcher's Backend protocol: us-east-2 has no capacity; islands started
    elsewhere run until stopped."""

    name: str = "skypilot"
    started: list = dataclasses.field(default_factory=list)

    def start(self, launch: IslandLaunch) -> str:
        if launch.spec.get("region") == "us-east-2":
            raise RuntimeError("sky.exceptions.ResourcesUnavailableError: InsufficientInstanceCapacity: We currently "
                               "do not have sufficient p5.48xlarge capacity in the Availability Zone you requested")
        self.started.append((launch.island, launch.generation, launch.spec["region"]))
        return f"job-{launch.island}-{launch.generation}"

    def status(self, run_id: str, island: int, generation: int, handle: str) -> IslandStatus:
        return IslandStatus(running=True)

    def statuses(self, islands: list[IslandRef]) -> list[IslandStatus]:
        return [IslandStatus(running=True) for _ in islands]

    def stop(self, run_id: str, island: int, generation: int, handle: str) -> None:
        pass


@pytest.mark.slow
async def test_a_refused_region_is_replaced_by_the_next_best_offer(fresh_nats, tmp_path, run_id, monkeypatch, capsys):
    no_cloud_credentials(tmp_path, monkeypatch)
    cloud, url, seen = RefusingCloud(), fresh_nats.url, Collected()
    bus = await connect(url, name="test")
    events, changed = seen.events, seen.changed
    watch = await seen.watch(bus, run_id)
    stop = asyncio.Event()
    launcher = launcher_wiring.spec(Effects({"skypilot": cloud}, url, poll_s=0.2), tick_s=0.5)
    planner = planner_wiring.build(SimpleNamespace(settings=SimpleNamespace(state_dir=tmp_path / "planner")),
                                   tick_s=0.5)
    tasks = [asyncio.create_task(run_service(launcher, url, instance="launcher", stop=stop))]
    try:
        fleet = [{"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True,
                  "price_per_hour": 13.0}]
        await bus.publish(LaunchRun(run_id=run_id, source="test", fleet=fleet, recipe=RECIPE))
        await until(lambda: [e for e in events if e.type == "OfferRefused"], 30, "the refusal", changed=changed)
        # the planner starts after the refusal: it finds it in its fold and answers on a tick (level-triggered)
        tasks.append(asyncio.create_task(run_service(planner, url, instance="planner", stop=stop)))

        def replaced():
            return [e for e in events if e.type == "IslandReplaced"]
        await until(replaced, 90, "the island replaced on another offer", changed=changed,
                    detail=lambda: f"seen {[e.type for e in events]}")
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await watch.close()
        await bus.close()
    refusal = next(e for e in events if e.type == "OfferRefused")
    assert (refusal.cloud, refusal.region, refusal.gpu, refusal.count, refusal.cause, refusal.generation) == \
        ("aws", "us-east-2", "H100", 8, "capacity", 0)
    up = replaced()[0]
    assert (up.generation, up.spec["region"], up.spec["gpu"], up.price_per_hour) == (1, "us-west-2", "H100", 12.6935)
    moved = next(e for e in events if e.type == "IslandRequested" and e.generation == 1)
    assert moved.spec["region"] == "us-west-2"
    assert cloud.started == [(0, 1, "us-west-2")]
    status = status_of(tmp_path / "state", run_id, events, capsys)
    assert f"island 0 gen 0: aws us-east-2 8xH100 (p5.48xlarge) refused (capacity) at {refusal.ts:%Y-%m-%d %H:%M:%S}: " \
           "sky.exceptions.ResourcesUnavailableError: InsufficientInstanceCapacity" in status
    assert f"      moved to aws us-west-2 8xH100 as gen 1 at {moved.ts:%Y-%m-%d %H:%M:%S}, $12.69/hr" in status


def test_the_launcher_moves_an_island_only_while_it_waits_on_the_refused_generation():
    spec = {"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True,
            "price_per_hour": 13.0}
    launched = [i.msg for i in decide({}, LaunchRun(id="L", run_id="r1", fleet=[spec], recipe=RECIPE), NOW)]
    state = reduce(evolve, [m for m in launched if not isinstance(m, StartIsland)], {})
    west = {**spec, "region": "us-west-2"}
    move = MoveIsland(run_id="r1", source="planner", island=0, generation=1, spec=west, price_per_hour=12.69,
                      refused="x", reason="us-east-2 refused")
    out = [i.msg for i in decide(state, move, NOW)]
    assert [type(m).__name__ for m in out] == ["StartIsland", "IslandRequested"]
    assert all(m.generation == 1 and m.spec == {**west, "price_per_hour": 12.69} for m in out)
    assert out[1].price_per_hour == 12.69
    moved = evolve(state, out[1])
    assert moved["r1"].islands[0].spec["region"] == "us-west-2" and decide(moved, move, NOW) == []
    old_start = next(m for m in launched if isinstance(m, StartIsland))
    assert decide(moved, old_start, NOW) == []          # the refused generation's start, retried, is superseded
    up = evolve(state, IslandUp(run_id="r1", source="launcher", island=0, spec=spec, backend="skypilot", handle="j"))
    assert decide(up, move, NOW) == []                   # capacity came back: the island is up where it was
    assert isinstance(out[1], IslandRequested)


def test_status_tells_a_refusal_and_where_the_island_moved_from_the_tape(tmp_path, capsys):
    spec = {"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True,
            "price_per_hour": 13.0}
    west = {**spec, "region": "us-west-2", "price_per_hour": 12.69}

    def requested(gen: int, s: dict, minute: int) -> IslandRequested:
        return IslandRequested(run_id="r1", source="launcher", island=0, generation=gen, spec=s,
                               ts=NOW.replace(minute=minute))
    hostile = refused("us-east-2").model_copy(update={"reason": "no capacity\x1b[2J\nnext line"})
    evs = [RunLaunched(run_id="r1", source="launcher", fleet=[spec, spec], recipe=RECIPE, ts=NOW),
           requested(0, spec, 0), hostile, hostile.model_copy(update={"id": "again"}),   # told twice: one refusal
           requested(1, spec, 1),                       # the same offer again is no move
           requested(2, west, 2).model_copy(update={"reason": (   # the move's reason: what changed, the bound kept
               "aws:1x8xh100@us-east-2 refused (capacity); next-best offer aws:1x8xh100@us-west-2 (p5.48xlarge) at "
               "$12.69/hr, another region; the fleet's $25.94/hr within the launched fleet's $26.00/hr + 10% "
               "($28.60/hr; the run named its fleet, no budget)\x1b[2J")}),
           refused("us-east-2").model_copy(update={"island": 1, "generation": 0})]
    out = status_of(tmp_path, "r1", evs, capsys)
    lines = out[out.index("offers refused at launch:"):].splitlines()
    assert lines[1:6] == [
        "    island 0 gen 0: aws us-east-2 8xH100 refused (capacity) at 2026-12-05 02:00:00: no capacity [2J next line",
        "      moved to aws us-west-2 8xH100 as gen 2 at 2026-12-05 02:02:00, $12.69/hr",
        "      next-best offer aws:1x8xh100@us-west-2 (p5.48xlarge) at $12.69/hr, another region; the fleet's $25.94/hr "
        "within the launched fleet's $26.00/hr + 10% ($28.60/hr; the run named its fleet, no budget) [2J",
        "    island 1 gen 0: aws us-east-2 8xH100 refused (capacity) at 2026-12-05 02:00:00: InsufficientInstanceCapacity",
        "      not moved yet: the planner moves it to the next-best offer (another region or cloud, or another GPU type "
        "or count that holds the model at its TFLOPs) within the run's budget, or says here why none is left"]
    assert main(["--state-dir", str(tmp_path), "status", "r1", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert [(r["island"], r["region"], (r["moved_to"] or {}).get("region")) for r in view["refusals"]] == \
        [(0, "us-east-2", "us-west-2"), (1, "us-east-2", None)]
