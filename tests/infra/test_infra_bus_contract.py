"""One contract for both buses: every check runs against a real nats-server and against MemoryBus."""
from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from yeto.infra.bus import NoResponders, connect
from yeto.infra.bus.memory import MemoryBus
from yeto.schemas.subjects import (
    CMD_STREAM,
    GKEY_STREAM,
    command_subject,
    event_subject,
    keyframe_subject,
    run_events,
    service_commands,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["nats", "memory"])
async def any_bus(request, nats_server):
    b = await connect(nats_server.url) if request.param == "nats" else MemoryBus()
    yield b
    await b.close()


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def fetch_all(consumer, n: int, timeout_s: float = 10.0) -> list:
    out, deadline = [], asyncio.get_running_loop().time() + timeout_s
    while len(out) < n and asyncio.get_running_loop().time() < deadline:
        out += await consumer.fetch(n - len(out), 0.5)
    return out


async def test_publish_returns_the_sequence_and_a_repeated_id_is_stored_once(any_bus, run_id):
    a = await any_bus.publish_raw(event_subject(run_id, "A"), b"1", msg_id=f"{run_id}-a")
    b = await any_bus.publish_raw(event_subject(run_id, "B"), b"2", msg_id=f"{run_id}-b", headers={"k": "v"})
    assert b > a
    assert await any_bus.publish_raw(event_subject(run_id, "A"), b"again", msg_id=f"{run_id}-a") == a
    got = await (await any_bus.consumer([run_events(run_id)], ack=False)).fetch(10, 5.0)   # all there is, at once
    assert [(d.subject, d.data, d.seq) for d in got] == [(event_subject(run_id, "A"), b"1", a),
                                                        (event_subject(run_id, "B"), b"2", b)]
    assert got[1].headers["k"] == "v" and [d.num_pending for d in got] == [1, 0]
    with pytest.raises(ConnectionError):
        await any_bus.publish_raw("nowhere.at.all", b"x", retry_for=0.3)


async def test_last_and_direct_get_read_stored_messages_and_a_per_subject_limit_drops_older_ones(any_bus, run_id):
    assert await any_bus.last(event_subject(run_id, "A")) is None
    await any_bus.publish_raw(event_subject(run_id, "A"), b"old")
    seq = await any_bus.publish_raw(event_subject(run_id, "A"), b"new", headers={"h": "1"})
    headers, data = await any_bus.last(event_subject(run_id, "A"))
    assert data == b"new" and headers["h"] == "1"
    first = await any_bus.publish_raw(keyframe_subject(run_id, 0, 0), b"k1")
    second = await any_bus.publish_raw(keyframe_subject(run_id, 0, 0), b"k2")
    assert await any_bus.direct_get(GKEY_STREAM, first) is None, "YETO_GKEY keeps one message per subject"
    assert (await any_bus.direct_get(GKEY_STREAM, second))[1] == b"k2"
    assert (await any_bus.last(keyframe_subject(run_id, 0, 0)))[1] == b"k2"
    assert await any_bus.direct_get(CMD_STREAM, 10**9) is None
    assert seq > 0


async def test_consumer_starts_after_a_sequence_and_counts_what_is_pending(any_bus, run_id):
    seqs = [await any_bus.publish_raw(event_subject(run_id, f"E{i}"), str(i).encode()) for i in range(5)]
    consumer = await any_bus.consumer([run_events(run_id)], ack=False, after_seq=seqs[1])
    assert await consumer.num_pending() == 3
    got = await consumer.fetch(2, 5.0)
    assert [d.seq for d in got] == seqs[2:4] and got[-1].num_pending == 1
    assert await consumer.num_pending() == 1
    assert [d.data for d in await fetch_all(consumer, 1)] == [b"4"]
    assert await consumer.fetch(10, 0.2) == []
    await consumer.close()


async def test_a_durable_work_queue_consumer_is_shared_and_an_acked_command_is_gone(any_bus):
    svc = unique("svc")
    seqs = [await any_bus.publish_raw(command_subject(svc, "Do"), str(i).encode()) for i in range(6)]
    one = await any_bus.consumer([service_commands(svc)], durable=svc)
    two = await any_bus.consumer([service_commands(svc)], durable=svc)
    got = await one.fetch(3, 5.0)
    got += await fetch_all(two, 3)
    assert sorted(d.seq for d in got) == seqs, "each command reaches one fetcher"
    for d in got:
        await d.ack()
    assert await one.fetch(10, 0.3) == [] and await two.fetch(10, 0.3) == []
    assert await any_bus.direct_get(CMD_STREAM, seqs[0]) is None, "the work queue forgets an acked command"
    await one.close()
    await two.close()


async def test_nak_with_delay_redelivers_after_the_delay_and_term_never(any_bus):
    svc = unique("svc")
    kept, dropped = [await any_bus.publish_raw(command_subject(svc, t), t.encode()) for t in ("Kept", "Dropped")]
    consumer = await any_bus.consumer([service_commands(svc)], durable=svc)
    first = {d.seq: d for d in await fetch_all(consumer, 2)}
    await first[kept].nak(delay_s=1.0)
    await first[dropped].term()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    again = await fetch_all(consumer, 1, timeout_s=10.0)
    assert [d.seq for d in again] == [kept] and loop.time() - t0 >= 0.8
    await again[0].ack()
    assert await consumer.fetch(10, 0.5) == []
    await consumer.close()


async def test_an_unacked_delivery_comes_back_after_ack_wait_until_max_deliver(any_bus):
    svc = unique("svc")
    seq = await any_bus.publish_raw(command_subject(svc, "Slow"), b"x")
    consumer = await any_bus.consumer([service_commands(svc)], durable=svc, ack_wait_s=1.0, max_deliver=2)
    assert [d.seq for d in await consumer.fetch(1, 5.0)] == [seq]
    assert [d.seq for d in await fetch_all(consumer, 1)] == [seq], "redelivered once ack_wait ran out"
    assert await consumer.fetch(1, 1.3) == [], "max_deliver=2: not a third time (it would be due after 1 s)"
    await consumer.close()


async def test_in_progress_holds_off_the_redelivery_for_another_ack_wait(any_bus):
    svc = unique("svc")
    seq = await any_bus.publish_raw(command_subject(svc, "Long"), b"x")
    consumer = await any_bus.consumer([service_commands(svc)], durable=svc, ack_wait_s=1.0)
    (held,) = await consumer.fetch(1, 5.0)
    assert await consumer.fetch(1, 0.7) == []
    await held.in_progress()                      # at ~0.7 s: due again at ~1.7 s instead of 1.0 s
    assert await consumer.fetch(1, 0.7) == [], "not redelivered at 1.0 s"
    assert [d.seq for d in await fetch_all(consumer, 1)] == [seq], "but once the renewed ack_wait ran out"
    await consumer.close()


async def test_max_ack_pending_holds_back_new_deliveries_until_acked(any_bus):
    svc = unique("svc")
    seqs = [await any_bus.publish_raw(command_subject(svc, "Do"), b"x") for _ in range(3)]
    consumer = await any_bus.consumer([service_commands(svc)], durable=svc, max_ack_pending=2)
    got = await fetch_all(consumer, 2)
    assert [d.seq for d in got] == seqs[:2]
    assert await consumer.fetch(5, 0.5) == []
    await got[0].ack()
    assert [d.seq for d in await fetch_all(consumer, 1)] == seqs[2:]
    await consumer.close()


async def watched(bus, subject: str, n: int, **kw) -> tuple[list, object]:
    seen, enough = [], asyncio.Event()

    async def on(d):
        seen.append(d)
        if len(seen) >= n:
            enough.set()
    sub = await bus.watch(subject, on, **kw)
    return seen, (sub, enough)


async def test_watch_delivers_in_order_from_all_last_per_subject_or_new(any_bus, run_id):
    for t, body in (("A", b"a1"), ("B", b"b1"), ("A", b"a2")):
        await any_bus.publish_raw(event_subject(run_id, t), body)
    every, (s1, e1) = await watched(any_bus, run_events(run_id), 4)
    last, (s2, e2) = await watched(any_bus, run_events(run_id), 3, deliver="last_per_subject")
    new, (s3, e3) = await watched(any_bus, run_events(run_id), 1, deliver="new", headers_only=True)
    await any_bus.publish_raw(event_subject(run_id, "C"), b"c1", headers={"h": "x"})
    await asyncio.wait_for(asyncio.gather(e1.wait(), e2.wait(), e3.wait()), 10)
    assert [d.data for d in every] == [b"a1", b"b1", b"a2", b"c1"]
    assert [d.data for d in last] == [b"b1", b"a2", b"c1"]
    assert [(d.data, d.headers["h"], d.subject) for d in new] == [(b"", "x", event_subject(run_id, "C"))]
    assert [d.seq for d in every] == sorted(d.seq for d in every)
    for s in (s1, s2, s3):
        await s.close()


async def test_request_reaches_a_server_and_fails_clearly_without_one(any_bus):
    subject = f"yeto.test.{unique('echo')}"
    with pytest.raises(NoResponders):
        await any_bus.request(subject, b"x", timeout_s=2)

    async def upper(payload: bytes) -> bytes:
        return payload.upper()
    sub = await any_bus.serve(subject, upper, queue="q")
    assert await any_bus.request(subject, b"hello", timeout_s=5) == b"HELLO"
    await sub.close()


async def test_a_consumer_asked_for_while_the_server_is_away_binds_once_it_is_back(fresh_nats, run_id):
    """A service opening its consumers during a reload or an election (a head node lost) waits for the server
    instead of dying at start: the open is retried, said in a line, and the consumer reads what was stored before."""
    bus = await connect(fresh_nats.url)
    logger, retried = logging.getLogger("yeto.infra.bus.nats_bus"), asyncio.Event()

    class Retried(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "not opened yet" in record.getMessage():
                retried.set()
    handler, level = Retried(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        await bus.publish_raw(event_subject(run_id, "Before"), b"1")
        await asyncio.to_thread(fresh_nats.stop)
        opening = asyncio.create_task(bus.consumer([run_events(run_id)], ack=False))
        await asyncio.wait_for(retried.wait(), 60)        # one try failed with the server away, and said so
        assert not opening.done()
        await asyncio.to_thread(fresh_nats.start)
        consumer = await asyncio.wait_for(opening, 90)
        assert [d.data for d in await fetch_all(consumer, 1, timeout_s=30)] == [b"1"]
        await consumer.close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        await bus.close()


async def test_nats_watch_and_ephemeral_consumer_survive_a_server_restart(fresh_nats, run_id):
    """Only the real bus has a server to lose: ordered watches and ephemeral consumers live in its memory."""
    bus = await connect(fresh_nats.url)
    try:
        await bus.publish_raw(event_subject(run_id, "Before"), b"1")
        seen, (sub, both) = await watched(bus, run_events(run_id), 2)
        consumer = await bus.consumer([run_events(run_id)], ack=False)
        assert [d.data for d in await fetch_all(consumer, 1)] == [b"1"]
        await asyncio.to_thread(fresh_nats.stop)
        await asyncio.to_thread(fresh_nats.start)
        await bus.publish_raw(event_subject(run_id, "After"), b"2")
        assert [d.data for d in await fetch_all(consumer, 1, timeout_s=30)] == [b"2"]
        await asyncio.wait_for(both.wait(), 30)   # the watch is re-created after two missed heartbeats
        assert [d.data for d in seen] == [b"1", b"2"]
        await sub.close()
        await consumer.close()
    finally:
        await bus.close()
