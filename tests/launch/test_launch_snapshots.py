"""The launcher and the finalizer on a real nats-server resume from their own snapshot: a restart folds only the
events after it, and the state it reaches is the one a full fold of every event gives. A snapshot stored under
another state shape's version is not resumed: the service folds from the first event."""
from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta, timezone
from functools import reduce
from typing import get_type_hints

import pytest

from run_history import CUT_AT, rich_run
from yeto.infra.bus import connect
from yeto.infra.runner import ServiceSpec, run_service
from yeto.infra.runner.snapshot import CODEC_VERSION, POSITION
from yeto.schemas.run_view import RunView
from yeto.schemas.shape import shape_version
from yeto.schemas.subjects import snapshot_subject
from yeto.services.finalizer import state as finalizer_state
from yeto.services.finalizer import wiring as finalizer_wiring
from yeto.services.launcher import state as launcher_state
from yeto.services.launcher import wiring as launcher_wiring
from yeto.services.launcher.effects import Effects

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def services(tmp_path) -> dict[str, tuple[ServiceSpec, object]]:
    """Each service's real spec and state module; the launcher with no backends (nothing to start or poll)."""
    return {"launcher": (launcher_wiring.spec(Effects({}, "nats://unused")), launcher_state),
            "finalizer": (finalizer_wiring.spec(tmp_path), finalizer_state)}


async def run_once(url: str, spec: ServiceSpec) -> tuple[object, int]:
    """Start the service, take the state it reconciles after catching up, stop it cleanly (which snapshots it);
    the state and how many events it folded."""
    seen, folded = [], [0]

    def evolve(state, event):
        folded[0] += 1
        return spec.evolve(state, event)

    def decide(state, msg, now):
        if msg is None and not seen:
            seen.append(state)
        return spec.decide(state, msg, now)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(dataclasses.replace(spec, evolve=evolve, decide=decide), url,
                                           instance=f"{spec.name}-test", stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 60)
    stop.set()
    await task
    return seen[0], folded[0]


async def snapshotted(bus, url: str, spec: ServiceSpec, events: list) -> tuple[object, int, dict, bytes]:
    """Publish the events and run the service once (it snapshots as it stops): the state it reached, how many
    events it folded, and the snapshot it stored (headers, bytes)."""
    for event in events:
        await bus.publish(event)
    state, folded = await run_once(url, spec)
    headers, data = await bus.last(snapshot_subject(spec.name))
    return state, folded, headers, data


@pytest.mark.parametrize("name", ["launcher", "finalizer"])
async def test_a_restart_resumes_from_the_snapshot_and_reaches_the_full_folds_state(fresh_nats, tmp_path, name):
    spec, state = services(tmp_path)[name]
    # Timed just before now, so the first start sees a final cut under way and decides nothing (no timeout passed).
    events = rich_run("r-snap", datetime.now(timezone.utc) - timedelta(seconds=100))
    bus = await connect(fresh_nats.url, name="test")
    try:
        first, folded_first, headers, data = await snapshotted(bus, fresh_nats.url, spec, events[:CUT_AT + 1])
        assert first == reduce(state.evolve, events[:CUT_AT + 1], {}) and folded_first >= CUT_AT + 1
        assert headers[CODEC_VERSION] == state.CODEC_VERSION and state.load(data) == first and int(headers[POSITION]) > 0
        for event in events[CUT_AT + 1:]:
            await bus.publish(event)
        resumed, folded_again = await run_once(fresh_nats.url, spec)
    finally:
        await bus.close()
    assert resumed == reduce(state.evolve, events, {})
    # the tail, and the services' own lifecycle events (stopped, started) published around the snapshot
    assert len(events) - CUT_AT - 1 <= folded_again <= len(events) - CUT_AT + 2


def another_shape() -> str:
    """The version of a state whose run view had one field more: what a fold change of shape stores."""
    hints = get_type_hints(RunView)
    grown = dataclasses.make_dataclass("RunView", [*((f.name, hints[f.name], f) for f in dataclasses.fields(RunView)),
                                                   ("num_restarts", int, dataclasses.field(default=0))], frozen=True)
    return shape_version(dict[str, grown])


@pytest.mark.parametrize("name", ["launcher", "finalizer"])
async def test_a_snapshot_of_another_shape_is_not_resumed_though_its_bytes_load(fresh_nats, tmp_path, name):
    spec, state = services(tmp_path)[name]
    events = rich_run("r-shape", datetime.now(timezone.utc) - timedelta(seconds=100))
    bus = await connect(fresh_nats.url, name="test")
    try:
        first, _, headers, data = await snapshotted(bus, fresh_nats.url, spec, events)
        assert state.load(data) == first and headers[CODEC_VERSION] == state.CODEC_VERSION != another_shape()
        await bus.publish_raw(snapshot_subject(spec.name), data, headers={**headers, CODEC_VERSION: another_shape()})
        again, folded = await run_once(fresh_nats.url, spec)
    finally:
        await bus.close()
    assert folded >= len(events) and again == reduce(state.evolve, events, {}), "refolded from the first event"
