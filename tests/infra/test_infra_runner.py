"""The service runner against a real nats-server (and the same checks on MemoryBus): shared commands,
poison messages, stop; snapshots: a restart folds only what came after, a bad snapshot means a full replay."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from typing import ClassVar, Literal

import pytest

from waiting import until
from yeto.infra.bus import Bus, connect
from yeto.infra.bus.memory import MemoryBus
from yeto.infra.runner import Publish, ServiceSpec, StateCodec, run_service
from yeto.infra.runner.snapshot import CODEC_VERSION, POSITION
from yeto.schemas.base import SYSTEM_RUN, Command, Event, registry
from yeto.schemas.subjects import command_subject, event_subject, run_events, snapshot_subject

pytestmark = [pytest.mark.timeout(120), pytest.mark.own_nats_server]   # pingsvc's folds and durable are its own


@registry.register
class _Ping(Command):
    owner: ClassVar[str] = "pingsvc"
    type: Literal["TestPing"] = "TestPing"
    version: Literal[1] = 1
    n: int


@registry.register
class _Pong(Event):
    type: Literal["TestPong"] = "TestPong"
    version: Literal[1] = 1
    n: int
    instance: str


def _spec(instance: str, run_id: str, seen: list, enough: asyncio.Event, n: int) -> ServiceSpec:
    def decide(state, msg, now):
        if isinstance(msg, _Ping):
            return [Publish(msg.caused(_Pong, n=msg.n, instance=instance, source=instance))]
        return []

    def evolve(state, event):
        if isinstance(event, _Pong):
            seen.append(event.n)
            if len(seen) >= n:
                enough.set()
        return state

    return ServiceSpec(name="pingsvc", decide=decide, evolve=evolve, event_subjects=(run_events(run_id),))


@pytest.fixture(params=["nats", "memory"])
async def target(request, nats_server):
    """(what run_service is given, a bus for the test): a URL of the real server, or one shared MemoryBus."""
    if request.param == "memory":
        mem = MemoryBus()
        yield mem, mem
        return
    bus = await connect(nats_server.url, name="test")
    yield nats_server.url, bus
    await bus.close()


async def _events(bus: Bus, subject: str) -> list[dict]:
    """Every event stored on `subject`, read to the end of the stream."""
    consumer = await bus.consumer([subject], ack=False)
    out = []
    if await consumer.num_pending():
        while not out or out[-1].num_pending:
            out += await consumer.fetch(1000, 5.0)
    await consumer.close()
    return [json.loads(d.data) for d in out]


async def _started(target, spec: ServiceSpec, instance: str, stop: asyncio.Event) -> asyncio.Task:
    ready = asyncio.Event()
    task = asyncio.create_task(run_service(spec, target, instance=instance, stop=stop, ready=ready))
    done, _ = await asyncio.wait([task, asyncio.create_task(ready.wait())], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    assert ready.is_set(), task.result() if task in done else "not ready within 60 s"
    return task


async def test_two_instances_share_one_durable_consumer_and_handle_each_command_once(target, run_id):
    url, bus = target
    stop = asyncio.Event()
    seen_a, seen_b, done_a, done_b = [], [], asyncio.Event(), asyncio.Event()
    tasks = [await _started(url, _spec("a", run_id, seen_a, done_a, 200), "a", stop),
             await _started(url, _spec("b", run_id, seen_b, done_b, 200), "b", stop)]
    for n in range(200):
        await bus.publish(_Ping(run_id=run_id, n=n))
    await asyncio.wait_for(asyncio.gather(done_a.wait(), done_b.wait()), 60)  # every instance folds every event
    pongs = await _events(bus, event_subject(run_id, "TestPong"))
    stop.set()
    await asyncio.gather(*tasks)
    assert sorted(p["n"] for p in pongs) == list(range(200))
    handlers = {p["instance"] for p in pongs}
    assert handlers == {"a", "b"}, f"both instances should have handled commands, got {handlers}"
    assert sorted(seen_a) == sorted(seen_b) == list(range(200))


async def test_malformed_command_is_terminated_with_a_rejection_event_and_the_consumer_goes_on(target, run_id):
    url, bus = target
    stop, seen, pong = asyncio.Event(), [], asyncio.Event()
    task = await _started(url, _spec("a", run_id, seen, pong, 1), "a", stop)
    ping = command_subject("pingsvc", "TestPing")
    await bus.publish_raw(ping, b"{not json", msg_id=f"{run_id}-bad1")
    await bus.publish_raw(ping, b'{"type":"TestPing","version":9}', msg_id=f"{run_id}-bad2")
    await bus.publish_raw(ping, b'{"type":"TestPing","version":1,"n":"x"}', msg_id=f"{run_id}-bad3")
    await bus.publish(_Ping(run_id=run_id, n=7))
    await asyncio.wait_for(pong.wait(), 60)    # commands are handled in order: the rejections came first
    pongs = await _events(bus, event_subject(run_id, "TestPong"))
    stop.set()
    await task
    rejected = [r for r in await _events(bus, event_subject(SYSTEM_RUN, "MessageRejected")) if r["consumer"] == "pingsvc"]
    reasons = " | ".join(r["reason"] for r in rejected)
    assert "not valid JSON" in reasons and "v9 is newer" in reasons and "failed validation at 'n'" in reasons
    assert [p["n"] for p in pongs] == [7]


@registry.register
class _Tick(Event):
    type: Literal["TestTick"] = "TestTick"
    version: Literal[1] = 1
    n: int


class _Counter:
    """A service folding TestTick events of one run into {n: count}, counting its evolve calls."""

    def __init__(self, run_id: str):
        self.run_id, self.calls, self.name = run_id, 0, f"snapsvc-{uuid.uuid4().hex[:8]}"
        self.target, self.reached = 0, asyncio.Event()
        self.codec = StateCodec(version="1", dump=lambda s: json.dumps(s, sort_keys=True).encode(),
                                load=lambda b: {k: int(v) for k, v in json.loads(b).items()})

    def evolve(self, state: dict, event) -> dict:
        self.calls += 1
        self.state = {**state, str(event.n): state.get(str(event.n), 0) + 1}
        if sum(self.state.values()) >= self.target:
            self.reached.set()
        return self.state

    async def run_until(self, url: str, total: int, also: asyncio.Event | None = None, **kw) -> dict:
        """Start, wait until the state holds `total` ticks (and `also` is set), stop cleanly; the final state."""
        stop, self.target, self.reached = asyncio.Event(), total, asyncio.Event()
        spec = ServiceSpec(name=self.name, initial=dict, evolve=self.evolve, event_subjects=(run_events(self.run_id),),
                           handles_commands=False, codec=self.codec, **kw)
        task = await _started(url, spec, self.name, stop)
        await asyncio.wait_for(self.reached.wait(), 60)
        if also:
            await asyncio.wait_for(also.wait(), 60)
        stop.set()
        await task
        return self.state


async def _ticks(bus: Bus, run_id: str, ns: range) -> list[int]:
    return [await bus.publish(_Tick(run_id=run_id, n=n % 3, source="test")) for n in ns]


async def test_a_restart_folds_only_the_events_after_its_snapshot_and_matches_a_full_replay(target, run_id):
    url, bus = target
    counter = _Counter(run_id)
    tenth = (await _ticks(bus, run_id, range(10)))[-1]
    snapshot_at_tenth = asyncio.Event()

    async def on_snapshot(d):
        if int(d.headers[POSITION]) == tenth:
            snapshot_at_tenth.set()
    watch = await bus.watch(snapshot_subject(counter.name), on_snapshot)
    # snapshot_s is long: a snapshot while it runs is one taken after 4 events or more
    first = await counter.run_until(url, 10, also=snapshot_at_tenth, snapshot_every=4, snapshot_s=3600)
    assert counter.calls == 10 and sum(first.values()) == 10
    await watch.close()
    await _ticks(bus, run_id, range(10, 13))
    counter.calls = 0
    resumed = await counter.run_until(url, 13)
    assert counter.calls == 3, "only the events after the snapshot are folded"
    full = _Counter(run_id)
    full.codec = None
    replayed = await full.run_until(url, 13)
    assert full.calls == 13 and resumed == replayed


@pytest.mark.parametrize("headers, data", [({CODEC_VERSION: "1", POSITION: "1"}, b"\xff not json"),
                                           ({CODEC_VERSION: "0", POSITION: "1"}, b"{}"),
                                           ({CODEC_VERSION: "1", POSITION: str(10**9)}, b"{}")],
                         ids=["bad-bytes", "other-version", "position-not-in-stream"])
async def test_a_snapshot_that_does_not_load_means_a_full_replay(target, run_id, headers, data):
    url, bus = target
    counter = _Counter(run_id)
    await _ticks(bus, run_id, range(5))
    await bus.publish_raw(snapshot_subject(counter.name), data, headers=headers)
    state = await counter.run_until(url, 5)
    assert counter.calls == 5 and state == {"0": 2, "1": 2, "2": 1}


def _poisoned_spec(run_id: str, seen: list, pong: asyncio.Event) -> ServiceSpec:
    """pingsvc whose evolve breaks on TestTick n=13 and whose decide breaks on TestPing n=13."""
    base = _spec("p", run_id, seen, pong, 1)

    def evolve(state, event):
        if isinstance(event, _Tick):
            if event.n == 13:
                raise KeyError("thirteen")
            return [*state, event.n]
        return base.evolve(state, event)

    def decide(state, msg, now):
        if isinstance(msg, _Ping) and msg.n == 13:
            raise TypeError("unlucky ping")
        return base.decide(state, msg, now)
    return dataclasses.replace(base, initial=list, evolve=evolve, decide=decide)


async def test_poison_that_breaks_evolve_or_decide_is_rejected_and_the_service_goes_on(target, run_id):
    url, bus = target
    stop, seen, pong = asyncio.Event(), [], asyncio.Event()
    spec = _poisoned_spec(run_id, seen, pong)
    ready = asyncio.Event()
    states: list = []
    task = asyncio.create_task(run_service(dataclasses.replace(spec, tick_s=0.05, decide=_recording(spec.decide, states)),
                                           url, instance="p", stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 60)
    for n in (1, 13, 2):
        await bus.publish(_Tick(run_id=run_id, n=n, source="test"))
    await bus.publish(_Ping(run_id=run_id, n=13))
    await bus.publish(_Ping(run_id=run_id, n=7))
    await asyncio.wait_for(pong.wait(), 60)               # handled after the poisoned ping
    await until(lambda: [1, 2] in states, 30, "the ticks around the poisoned one folded")
    stop.set()
    await task                                            # a clean stop: nothing died
    rejected = [r for r in await _events(bus, event_subject(SYSTEM_RUN, "MessageRejected")) if r["consumer"] == "pingsvc"]
    reasons = {r["reason"] for r in rejected}
    assert "evolve: KeyError: 'thirteen'" in reasons and "TypeError: unlucky ping" in reasons, reasons
    assert all(r["stream_seq"] and r["subject"] for r in rejected)
    assert all(13 not in s for s in states if isinstance(s, list))


def _recording(decide, states: list):
    def wrapped(state, msg, now):
        states.append(state)
        return decide(state, msg, now)
    return wrapped


class _DeadConsumer:
    async def num_pending(self) -> int:
        return 1

    async def fetch(self, max_msgs: int, timeout_s: float):
        raise ConnectionError("the event stream is gone")

    async def close(self) -> None:
        pass


async def test_a_fold_that_dies_before_catching_up_ends_the_service_with_its_error():
    class Broken(MemoryBus):
        async def consumer(self, subjects, **kw):
            return _DeadConsumer() if kw.get("ack") is False else await super().consumer(subjects, **kw)
    bus = Broken()
    spec = ServiceSpec(name="deadfold", handles_commands=False)
    with pytest.raises(ConnectionError, match="stream is gone"):   # was: waiting forever for the fold to catch up
        await asyncio.wait_for(run_service(spec, bus, instance="d", stop=asyncio.Event()), 30)


async def test_a_loop_that_dies_after_start_ends_the_service_with_its_error(target, run_id):
    url, _ = target

    async def crashes(ctx):
        raise RuntimeError("background job died")
    spec = ServiceSpec(name=f"deadjob-{uuid.uuid4().hex[:6]}", handles_commands=False, background=(crashes,),
                       event_subjects=(run_events(run_id),))
    with pytest.raises(RuntimeError, match="background job died"):
        await asyncio.wait_for(run_service(spec, url, instance="j", stop=asyncio.Event()), 30)
