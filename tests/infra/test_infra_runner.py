"""The service runner against a real nats-server: shared commands, poison messages, replay, stop."""
from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

from yeto.infra.bus import Bus
from yeto.infra.runner import Publish, ServiceSpec, run_service
from yeto.schemas.base import Command, Event, registry


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


def _spec(instance: str, seen: list) -> ServiceSpec:
    def decide(state, msg, now):
        if isinstance(msg, _Ping):
            return [Publish(msg.caused(_Pong, n=msg.n, instance=instance, source=instance))]
        return []

    def evolve(state, event):
        if isinstance(event, _Pong):
            seen.append(event.n)
        return state

    return ServiceSpec(name="pingsvc", decide=decide, evolve=evolve)


async def _events(bus: Bus, run_id: str, type_: str) -> list[dict]:
    import json

    sub = await bus.js.subscribe(f"yeto.evt.{run_id}.{type_}", ordered_consumer=True)
    out = []
    try:
        while True:
            out.append(json.loads((await sub.next_msg(timeout=0.5)).data))
    except Exception:  # noqa: BLE001 - timeout: no more messages
        pass
    await sub.unsubscribe()
    return out


async def test_two_instances_share_one_durable_consumer_and_handle_each_command_once(nats_server, bus, run_id):
    stop = asyncio.Event()
    seen_a, seen_b = [], []
    tasks = [asyncio.create_task(run_service(_spec("a", seen_a), nats_server.url, instance="a", stop=stop)),
             asyncio.create_task(run_service(_spec("b", seen_b), nats_server.url, instance="b", stop=stop))]
    await asyncio.sleep(0.5)
    for n in range(200):
        await bus.publish(_Ping(run_id=run_id, n=n))
    for _ in range(200):  # every instance folds every event, whoever handled the command
        if len(seen_a) >= 200 and len(seen_b) >= 200:
            break
        await asyncio.sleep(0.1)
    pongs = await _events(bus, run_id, "TestPong")
    stop.set()
    await asyncio.gather(*tasks)
    assert sorted(p["n"] for p in pongs) == list(range(200))
    handlers = {p["instance"] for p in pongs}
    assert handlers == {"a", "b"}, f"both instances should have handled commands, got {handlers}"
    assert sorted(seen_a) == sorted(seen_b) == list(range(200))


async def test_malformed_command_is_terminated_with_a_rejection_event_and_the_consumer_goes_on(nats_server, bus, run_id):
    stop = asyncio.Event()
    task = asyncio.create_task(run_service(_spec("a", seen := []), nats_server.url, instance="a", stop=stop))
    await asyncio.sleep(0.5)
    await bus.publish_raw("yeto.cmd.pingsvc.TestPing", b"{not json", msg_id=f"{run_id}-bad1")
    await bus.publish_raw("yeto.cmd.pingsvc.TestPing", b'{"type":"TestPing","version":9}', msg_id=f"{run_id}-bad2")
    await bus.publish_raw("yeto.cmd.pingsvc.TestPing", b'{"type":"TestPing","version":1,"n":"x"}', msg_id=f"{run_id}-bad3")
    await bus.publish(_Ping(run_id=run_id, n=7))
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.1)
    pongs = await _events(bus, run_id, "TestPong")
    stop.set()
    await task
    rejected = [r for r in await _events(bus, "_", "MessageRejected") if r["consumer"] == "pingsvc"]
    reasons = " | ".join(r["reason"] for r in rejected)
    assert "not valid JSON" in reasons and "v9 is newer" in reasons and "failed validation at 'n'" in reasons
    assert [p["n"] for p in pongs] == [7]
