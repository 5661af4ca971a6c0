"""The planner service as a real process: PlanFleet over NATS in, FleetPlanned / FleetPlanFailed out; OfferRefused folded."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from yeto.schemas.commands import PlanFleet
from yeto.schemas.offers import OfferRefused
from yeto.schemas.subjects import run_events

pytestmark = pytest.mark.slow
CATALOG = Path(__file__).resolve().parents[2] / "services" / "planner" / "fixtures" / "catalog"


async def _answer(bus, run_id: str) -> dict:
    """The first event of the run: the planner's answer."""
    first = asyncio.get_running_loop().create_future()

    async def on_event(d) -> None:
        if not first.done():
            first.set_result(json.loads(d.data))
    watch = await bus.watch(run_events(run_id), on_event)
    try:
        return await asyncio.wait_for(first, 90)
    finally:
        await watch.close()


async def test_planner_process_answers_plan_fleet_over_nats(nats_server, bus, run_id, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "yeto.services.planner", "--nats-url", nats_server.url,
                             "--state-dir", str(tmp_path)], env={**os.environ, "YETO_CATALOG_DIR": str(CATALOG)})
    try:
        await bus.publish(PlanFleet(run_id=run_id, source="test", request={"model": "qwen35-9b", "budget": 40.0}))
        ok = await _answer(bus, run_id)
        assert ok["type"] == "FleetPlanned" and ok["plan"]["total_price_per_hour"] <= 40.0 and ok["plan"]["islands"]
        await bus.publish(PlanFleet(run_id=run_id + "-x", source="test", request={"model": "qwen35-9b", "budget": 0.5}))
        bad = await _answer(bus, run_id + "-x")
        assert bad["type"] == "FleetPlanFailed" and "cheapest" in bad["reason"]
    finally:
        proc.terminate()
        proc.wait(10)


async def test_the_planner_service_plans_around_an_offer_refused_on_the_tape(nats_server, bus, run_id, tmp_path):
    env = {**os.environ, "YETO_CATALOG_DIR": str(CATALOG), "AWS_EC2_METADATA_DISABLED": "true"}
    env.pop("RUNPOD_API_KEY", None)
    proc = subprocess.Popen([sys.executable, "-m", "yeto.services.planner", "--nats-url", nats_server.url,
                             "--state-dir", str(tmp_path)], env=env)
    request = {"model": "qwen35-9b", "budget": 40.0, "clouds": ["aws"]}
    try:
        await bus.publish(PlanFleet(run_id=run_id, source="test", request=request))
        before = (await _answer(bus, run_id))["plan"]
        assert "us-east-2" in {i["region"] for i in before["islands"]}
        await bus.publish(OfferRefused(run_id=run_id + "-launch", source="launcher", island=0, cloud="aws",
                                       region="us-east-2", gpu="H100", count=8, cause="capacity",
                                       reason="InsufficientInstanceCapacity"))
        for attempt in range(20):       # the refusal (an event) and the command travel apart: ask until it is folded
            await bus.publish(PlanFleet(run_id=f"{run_id}-{attempt}", source="test", request=request))
            after = (await _answer(bus, f"{run_id}-{attempt}"))["plan"]
            if any(s["signal"] == "refusal" for s in after["signals"]):
                break
        else:
            raise AssertionError("the planner never planned with the refusal")
        assert after["islands"] and "us-east-2" not in {i["region"] for i in after["islands"]}
        assert any(r["shape"] == "aws:8xh100@us-east-2 (p5.48xlarge)" and "refused at launch" in r["reason"]
                   for r in after["rejected"])
    finally:
        proc.terminate()
        proc.wait(10)
