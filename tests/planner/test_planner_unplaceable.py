"""A refused island no offer can replace: the planner says why and what to change, on the tape (ReplanFailed), and
`yeto status RUN` and `launch --wait`'s progress lines say it in one sentence naming the --gpu entry, the excluded
region and the budget. On a real nats-server with the launcher and the planner as services."""
from __future__ import annotations

import json

import pytest

from replan_world import Collected, launcher_and_planner, no_cloud_credentials, status_of
from test_planner_replan import P5, RECIPE, RefusingCloud, refused
from waiting import until
from yeto.cli.follow import Progress
from yeto.cli.main import main
from yeto.infra.bus import connect
from yeto.schemas.commands import LaunchRun
from yeto.schemas.offers import ReplanFailed
from yeto.services.planner import wiring as planner_wiring
from yeto.services.planner.replan import Unplaceable, replacement
from yeto.services.planner.signals import Signals

pytestmark = [pytest.mark.timeout(120)]


def test_an_unplaceable_island_names_the_dearer_offer_or_another_shape_and_the_planner_with_the_region_excluded():
    dear = replacement(refused("us-east-2", price=5.0), P5, Signals())
    assert dear == Unplaceable(
        "the cheapest other aws offer of 1x8xH100, us-west-2 at $12.69/hr, costs more than the refused $5.00/hr + 10%",
        "launch again with --gpu aws:8xh100@us-west-2 to pay $12.69/hr for it, or without --gpu with "
        "--exclude-regions us-east-2 so the planner picks the fleet within --budget-per-hour (raise it to allow that)")
    none_left = replacement(refused("us-east-2"), P5[:1], Signals())
    assert isinstance(none_left, Unplaceable) and none_left.advice == (
        "launch again with a --gpu entry of another GPU type or cloud than aws 8xH100, or without --gpu with "
        "--exclude-regions us-east-2 so the planner picks the fleet within --budget-per-hour")
    anywhere = replacement(refused("").model_copy(update={"region": ""}), P5[:0], Signals())
    assert "--exclude-regions" not in anywhere.advice       # the cloud picked the region: nothing to exclude


@pytest.mark.slow
async def test_a_refusal_no_offer_can_replace_reaches_the_tape_and_status_says_what_to_change(
        fresh_nats, tmp_path, run_id, monkeypatch, capsys):
    no_cloud_credentials(tmp_path, monkeypatch)
    url, seen = fresh_nats.url, Collected()
    bus = await connect(url, name="test")
    watch = await seen.watch(bus, run_id)
    try:   # $5/hr for an 8xH100 spot island: every other region of the fixture catalog costs more than that + 10%
        async with launcher_and_planner(url, RefusingCloud(), tmp_path / "planner"):
            fleet = [{"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True,
                      "price_per_hour": 5.0}]
            await bus.publish(LaunchRun(run_id=run_id, source="test", fleet=fleet, recipe=RECIPE))
            await until(lambda: seen.of("ReplanFailed"), 90, "the planner's ReplanFailed", changed=seen.changed,
                        detail=lambda: f"seen {[e.type for e in seen.events]}")
    finally:
        await watch.close()
        await bus.close()
    failed, refusal = seen.of("ReplanFailed")[0], seen.of("OfferRefused")[0]
    assert (failed.island, failed.generation, failed.refused, failed.causation_id) == (0, 0, refusal.id, refusal.id)
    assert failed.reason.startswith("the cheapest other aws offer of 1x8xH100, us-west-2 at $12.69/hr")
    assert not [e for e in seen.events if e.type == "IslandRequested" and e.generation > 0]     # never moved
    status = status_of(tmp_path / "state", run_id, seen.events, capsys)
    assert ("      no offer can take its place: the cheapest other aws offer of 1x8xH100, us-west-2 at $12.69/hr, "
            "costs more than the refused $5.00/hr + 10%; launch again with --gpu aws:8xh100@us-west-2 to pay "
            "$12.69/hr for it, or without --gpu with --exclude-regions us-east-2 so the planner picks the fleet "
            "within --budget-per-hour (raise it to allow that).\n") in status
    assert main(["--state-dir", str(tmp_path / "state"), "status", run_id, "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert [r["unplaced"] for r in view["refusals"]] == [f"{failed.reason}; {failed.advice}"]
    progress = Progress()       # what `launch --wait` prints for them: the refusal once, however often retried
    lines = [progress.line(e) for e in (refusal, refusal.model_copy(update={"id": "retried"}), failed)]
    assert lines[0].startswith("  island 0 g0: aws us-east-2 8xH100 refused (capacity: sky.exceptions.")
    assert lines[1:] == [None, f"  island 0 g0: no offer can take its place: {failed.reason}; {failed.advice}."]


def test_the_planner_says_an_island_is_unplaceable_once_and_folds_its_own_word():
    failed = ReplanFailed(run_id="r1", source="planner", island=0, refused="x", reason="r", advice="a")
    state = planner_wiring.evolve(planner_wiring.State(), failed)
    assert state.unplaced == frozenset({"x"})
