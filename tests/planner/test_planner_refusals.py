"""A cloud's "no" at launch: the launcher tells capacity and quota refusals apart and records them (OfferRefused),
and the planner plans around a refused offer until its cool-down ends (the real service: test_planner_service.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from waiting import until
from yeto.infra.runner.spec import Retry
from yeto.schemas.fleet import StartIsland
from yeto.schemas.subjects import event_subject
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.logic import Spawn
from yeto.services.launcher.refusals import kind_of, refusal
from yeto.services.planner.catalog import Offering
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.refusals import with_refusals
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals

# own server: a planner service replays every OfferRefused on its server, and this one's are not for the others
pytestmark = [pytest.mark.timeout(120), pytest.mark.own_nats_server]
T0 = datetime(2026, 12, 5, 1, 0, tzinfo=timezone.utc)
P5 = {"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True,
      "price_per_hour": 11.25}


@pytest.mark.parametrize("error, kind", [
    ("An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation: We currently do not "
     "have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-2a).", "capacity"),
    ("An error occurred (MaxSpotInstanceCountExceeded) when calling the RequestSpotInstances operation", "quota"),
    ("VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit of 0 allows", "quota"),
    ("ZONE_RESOURCE_POOL_EXHAUSTED: The zone 'projects/p/zones/us-central1-a' does not have enough resources", "capacity"),
    ("QUOTA_EXCEEDED: Quota 'PREEMPTIBLE_NVIDIA_H100_GPUS' exceeded. Limit: 0.0 in region us-central1.", "quota"),
    ("sky.exceptions.ResourcesUnavailableError: Failed to acquire resources in all zones in us-east-2", "capacity"),
    ("There are no longer any instances available with the requested specifications.", "capacity"),
    ("Code: SkuNotAvailable. The requested VM size Standard_ND96asr_v4 is currently not available", "capacity"),
    ("ssh: connect to host 203.0.113.7 port 22: Connection refused", None),
    ("image pull failed: manifest unknown", None),
])
def test_the_launcher_tells_capacity_and_quota_refusals_from_other_failures(error, kind):
    assert kind_of(error) == kind


def test_a_refusal_names_the_offer_once_per_island_generation():
    err = "InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge capacity in us-east-2a"
    r = refusal(P5, err, run_id="r1", island=2, generation=1, source="launcher")
    assert r is not None and (r.cloud, r.region, r.gpu, r.count, r.instance_type, r.cause) == \
        ("aws", "us-east-2", "H100", 8, "p5.48xlarge", "capacity")
    assert r.id == refusal(P5, err + " (again)", run_id="r1", island=2, generation=1, source="launcher").id
    assert refusal(P5, "Connection refused", run_id="r1", island=2, generation=1, source="launcher") is None


def off(region: str, spot: float) -> Offering:
    return Offering("aws", region, "p5.48xlarge", "H100", 8, 192.0, 2048.0, 55.04, spot)


def test_a_refused_offer_is_planned_around_until_its_cool_down_ends():
    catalog = [off("us-east-2", 11.25), off("us-west-2", 12.69)]
    req = PlanRequest(model="qwen35-9b", budget=15.0)
    refused = refusal(P5, "InsufficientInstanceCapacity (p5.48xlarge)", run_id="r1", island=0, generation=0,
                      source="launcher")
    assert refused is not None
    refused = refused.model_copy(update={"ts": T0})
    assert [i["region"] for i in plan_fleet(req, catalog, Signals()).islands] == ["us-east-2"]
    during = plan_fleet(req, catalog, with_refusals(Signals(), [refused], T0 + timedelta(minutes=10)))
    assert [i["region"] for i in during.islands] == ["us-west-2"]
    why = next(r for r in during.rejected if r["shape"] == "aws:8xh100@us-east-2 (p5.48xlarge)")
    assert why["code"] == "stock" and "capacity refused at launch 01:00:00 UTC" in why["reason"]
    assert "avoided for 20 more min" in why["reason"]
    assert {(s["signal"], s["key"], s["value"]) for s in during.signals} == {("refusal", "us-east-2/8xH100", "capacity")}
    after = plan_fleet(req, catalog, with_refusals(Signals(), [refused], T0 + timedelta(minutes=31)))
    assert [i["region"] for i in after.islands] == ["us-east-2"]


@dataclass
class RefusingCloud:
    """A stand-in provisioning behind the Backend protocol: eu-north-1 has no capacity, other regions start."""

    name: str = "skypilot"

    def start(self, launch: IslandLaunch) -> str:
        if launch.spec.get("region") == "eu-north-1":
            raise RuntimeError("sky.exceptions.ResourcesUnavailableError: InsufficientInstanceCapacity: We currently "
                               "do not have sufficient p5.48xlarge capacity in the Availability Zone you requested")
        return f"job-{launch.island}"


@dataclass
class _Ctx:
    bus: object


async def test_the_launcher_records_a_refusal_on_the_bus_and_retries(bus, run_id):
    seen: list[dict] = []

    async def on_event(d) -> None:
        seen.append(json.loads(d.data))
    watch = await bus.watch(event_subject(run_id, "OfferRefused"), on_event)
    effects = Effects({"skypilot": RefusingCloud()}, "nats://127.0.0.1:4222")

    def start(region: str) -> Spawn:
        return Spawn(StartIsland(run_id=run_id, source="test", island=0, generation=0, spec={**P5, "region": region},
                                 recipe={"train": {"model": "m", "data": "d"}, "bus_url": "tls://203.0.113.7:4222"},
                                 num_islands=1, price_per_hour=11.25))
    try:
        with pytest.raises(Retry, match="InsufficientInstanceCapacity"):
            await effects.spawn(start("eu-north-1"), _Ctx(bus))
        assert (await effects.spawn(start("us-west-2"), _Ctx(bus))).type == "IslandUp"
        await until(lambda: seen, 10, "the OfferRefused event")
    finally:
        await watch.close()
    assert [(e["cloud"], e["region"], e["gpu"], e["cause"]) for e in seen] == [("aws", "eu-north-1", "H100", "capacity")]
