"""Poison on the bus: every event type with missing or wrongly typed fields, RunLaunched payloads that once broke
the folds (a string `train`, string / NaN / negative prices) and hostile LaunchRun commands. The real launcher,
finalizer and syncer (in-process, on a real nats-server) reject them with MessageRejected and then still launch and
stop a run: LaunchRun -> RunLaunched, IslandUp; StopRun -> FinalCutRequested, FinalCutDone, RunFailed, IslandStopped."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

import yeto.schemas as schemas
from waiting import until
from yeto.infra.bus import Bus, connect
from yeto.infra.runner import run_service
from yeto.schemas import registry
from yeto.schemas.base import SYSTEM_RUN, parse
from yeto.schemas.commands import LaunchRun, StopRun
from yeto.schemas.subjects import command_subject, event_subject, run_events
from yeto.services.finalizer import wiring as finalizer_wiring
from yeto.services.launcher import wiring as launcher_wiring
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.effects import Effects
from yeto.services.syncer import wiring as syncer_wiring
from yeto.services.syncer.dataplane import DataPlane

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.own_nats_server]
FIXTURES = Path(schemas.__file__).parent / "fixtures"
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}
RECIPE = {"train": {"model": "m"}, "limits": {}, "final_ack_timeout_s": 1, "recover_timeout_s": 60}
HOSTILE_FLEETS = [[{**SPEC, "price_per_hour": "abc"}], [{**SPEC, "price_per_hour": float("nan")}],
                  [{**SPEC, "price_per_hour": -5.0}], [{**SPEC, "price_per_hour": float("inf")}],
                  [{**SPEC, "count": 99999999999}], [{**SPEC, "cloud": "moon"}], [{**SPEC, "count": "8"}], "x", [["x"]]]
HOSTILE_RECIPES = [{"train": "x"}, {"limits": {"max_spend": "lots"}}, {"limits": {"max_spend": float("nan")}},
                   {"train": {"sync": {"num_fragments": "x"}}}, {"sync": {"outer_lr": -1}}, {"recover_timeout_s": "10m"},
                   {"head_price_per_hour": -1}, {"limits": "none"}, {"train": {"lr": float("nan")}}]


def sleeper(launch, recipe_path, rank, port):
    # A stand-in learner that runs until it is stopped: the sleep is what it does, not a wait for anything.
    return [sys.executable, "-c", "import time; time.sleep(120)"]


def _wrong(value):
    """A value of another JSON type than the fixture's."""
    return "x" if isinstance(value, (dict, list)) else {"x": [1]}


def broken_events(run_id: str) -> list[dict]:
    """Per registered event type and version: every field missing, and each field in turn of the wrong type."""
    out = []
    for path in sorted(FIXTURES.glob("*.json")):
        base = {**json.loads(path.read_text()), "run_id": run_id}
        if registry.classes[(base["type"], registry.latest[base["type"]])].kind != "event":
            continue
        out.append({k: base[k] for k in ("type", "version", "run_id")})
        out += [{**base, name: _wrong(value), "id": f"{base['id']}-{name}"} for name, value in base.items()
                if name not in ("type", "version")]
    return out


def hostile_run_launched(run_id: str) -> list[dict]:
    base = {"type": "RunLaunched", "version": 1, "run_id": run_id, "source": "launcher"}
    return ([{**base, "id": f"fleet-{i}", "fleet": f, "recipe": RECIPE} for i, f in enumerate(HOSTILE_FLEETS)] +
            [{**base, "id": f"recipe-{i}", "fleet": [SPEC], "recipe": r} for i, r in enumerate(HOSTILE_RECIPES)] +
            [{"type": "IslandUp", "version": 1, "run_id": run_id, "island": 0, "spec": SPEC, "price_per_hour": p, "id": f"up-{p}"}
             for p in ("NaN", -1.0, "lots")])


async def publish_all(bus: Bus, run_id: str, payloads: list[dict]) -> list[int]:
    """On the run's event subjects (a wrongly typed run_id in the payload does not pick the subject)."""
    return [await bus.publish_raw(event_subject(run_id, p["type"]), json.dumps(p).encode()) for p in payloads]


class Seen:
    """Events of a subject as they are published."""

    def __init__(self):
        self.events, self.changed = [], asyncio.Event()

    async def start(self, bus: Bus, subject: str) -> Seen:
        async def collect(d):
            self.events.append(parse(d.data))
            self.changed.set()
        self.sub = await bus.watch(subject, collect)
        return self

    async def wait(self, what, timeout: float = 60.0):
        return await until(lambda: [e for e in self.events if what(e)], timeout, "events", changed=self.changed,
                           detail=lambda: str(sorted({e.type for e in self.events})))


async def test_every_service_survives_poison_and_still_launches_and_stops_a_run(nats_server, tmp_path, run_id):
    url = nats_server.url
    bus = await connect(url, name="attacker")
    victim, junk = run_id, f"{run_id}-junk"
    before = await publish_all(bus, junk, broken_events(junk))          # on the stream before the services start
    before += await publish_all(bus, victim, hostile_run_launched(victim))
    tape = await Seen().start(bus, run_events(victim))
    rejected = await Seen().start(bus, event_subject(SYSTEM_RUN, "MessageRejected"))
    backend = LocalBackend(tmp_path, rank_argv=sleeper)
    stop, ready = asyncio.Event(), {name: asyncio.Event() for name in ("launcher", "finalizer", "syncer")}
    specs = {"launcher": launcher_wiring.spec(Effects({"local": backend}, url, poll_s=0.2), tick_s=0.3),
             "finalizer": finalizer_wiring.spec(tmp_path, tick_s=0.3),
             "syncer": syncer_wiring.spec(DataPlane(state_dir=tmp_path, instance="syncer"))}
    tasks = {n: asyncio.create_task(run_service(s, url, instance=n, stop=stop, ready=ready[n])) for n, s in specs.items()}
    try:
        await until(lambda: all(r.is_set() for r in ready.values()) or any(t.done() for t in tasks.values()), 90,
                    "every service to fold the poisoned stream and be ready")
        assert not [n for n, t in tasks.items() if t.done()], {n: t for n, t in tasks.items() if t.done()}
        live = await publish_all(bus, victim, hostile_run_launched(victim)) + await publish_all(bus, junk, broken_events(junk))
        for i, fleet in enumerate(HOSTILE_FLEETS):   # hostile commands: rejected, never a RunLaunched
            hostile = dict(type="LaunchRun", version=1, id=f"hostile-{i}", run_id=victim, fleet=fleet, recipe=RECIPE)
            await bus.publish_raw(command_subject("launcher", "LaunchRun"), json.dumps(hostile).encode())
        await bus.publish(LaunchRun(id=f"{victim}-launch", run_id=victim, fleet=[SPEC], recipe=RECIPE))
        (launched,) = await tape.wait(lambda e: e.type == "RunLaunched")
        assert launched.fleet == [SPEC] and launched.recipe == RECIPE
        await tape.wait(lambda e: e.type == "IslandUp")
        await bus.publish(StopRun(id=f"{victim}-down", run_id=victim))                         # `yeto down`
        for kind in ("FinalCutRequested", "FinalCutDone", "RunFailed", "IslandStopped"):
            await tape.wait(lambda e, kind=kind: e.type == kind)
        assert not [n for n, t in tasks.items() if t.done()], "a service died of poison"
        for service in ("launcher", "finalizer", "syncer"):   # the RunLaunched poison published live, seen by each
            await rejected.wait(lambda e, s=service: e.consumer == s and e.stream_seq in live[:len(HOSTILE_FLEETS)])
        by_launcher = await rejected.wait(lambda e: e.consumer == "launcher" and "LaunchRun" in e.subject, timeout=30)
        assert len({e.stream_seq for e in by_launcher}) == len(HOSTILE_FLEETS)
        assert all("failed validation at 'fleet" in e.reason for e in by_launcher), [e.reason for e in by_launcher]
        replayed = {e.stream_seq for e in rejected.events if e.consumer == "launcher" and e.subject.startswith("yeto.evt.")}
        assert replayed and set(before).isdisjoint(replayed), \
            "a replay logs what it skips; it does not publish the rejection again"
    finally:
        stop.set()
        results = await asyncio.gather(*tasks.values(), return_exceptions=True)
        await tape.sub.close()
        await rejected.sub.close()
        await bus.close()
        backend.stop(victim, 0, 0, "", sig=9)
    assert not [r for r in results if isinstance(r, BaseException)], results
