"""Which events end an island is told once (schemas/fleet.py's ISLAND_ENDS), and every reader takes it from there.

For each end in the table, and for no other island event: the syncer subscribes to it and stops counting the
generation as live, the island's meter stops, and the dashboard closes the island's span with the table's word.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from yeto.cli.dashboard.model import Board, absorb
from yeto.schemas import fleet
from yeto.schemas.fleet import ISLAND_ENDS, IslandEvent, RunLaunched
from yeto.schemas.spend import Meter
from yeto.schemas.subjects import event_subject
from yeto.services.syncer import runs
from yeto.services.syncer.dataplane import DataPlane
from yeto.services.syncer.wiring import spec

RUN, T0 = "r-ends", datetime(2025, 1, 1, tzinfo=timezone.utc)
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": "", "spot": False}
NOT_ENDS = ("IslandRequested", "IslandUp")     # news of the same generation that does not end it


def island_event(type_: str, minute: int) -> IslandEvent:
    cls = getattr(fleet, type_)
    extra = {"reason": "x"} if "reason" in cls.model_fields else {}
    return cls(run_id=RUN, island=0, spec=SPEC, price_per_hour=2.0, ts=T0 + timedelta(minutes=minute), **extra)


def history(type_: str) -> list:
    launched = RunLaunched(run_id=RUN, fleet=[SPEC], recipe={"train": {"max_steps": 10}}, ts=T0)
    return [launched, island_event("IslandUp", 1), island_event(type_, 30)]


def test_the_table_names_island_events_only():
    assert set(ISLAND_ENDS) == {"IslandExited", "IslandPreempted", "IslandStopped", "IslandDropped"}
    assert all(issubclass(getattr(fleet, t), IslandEvent) for t in ISLAND_ENDS)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("type_", [*ISLAND_ENDS, *NOT_ENDS])
def test_the_syncer_the_meter_and_the_dashboard_end_an_island_on_the_tables_events_alone(type_, tmp_path):
    ends = type_ in ISLAND_ENDS
    subjects = spec(DataPlane(state_dir=tmp_path)).event_subjects
    assert (event_subject("*", type_) in subjects) == (ends or type_ == "IslandUp")
    syncer = reduce(runs.evolve, history(type_), runs.SyncerState())
    assert syncer.runs[RUN].gone == ({"island-0": 0} if ends else {})
    meter = Meter().apply("IslandUp", T0, 2.0, 0).apply(type_, T0 + timedelta(minutes=30), 2.0, 0)
    assert (meter.up_since is None) == ends
    board = reduce(lambda b, seq_event: absorb(b, *seq_event), enumerate(history(type_), 1), Board())
    span = board.spans[0]       # island 0's generation 0, up from minute 1
    if ends:
        assert (span["end"], span["ended"]) == (30 * 60.0, ISLAND_ENDS[type_])
    else:
        assert span["ended"] in (None, "replaced") and span["ended"] not in ISLAND_ENDS.values()
