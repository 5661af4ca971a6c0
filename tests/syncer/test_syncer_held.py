"""A leased syncer's held pushes on a real nats-server, its consumer with the short ack wait it keeps through a
takeover (services/syncer/takeover.py): kept alive every second they are never delivered again, however long their
round; once its lease is not fresh the keep-alives stop and the pushes are delivered again, left out by the holder
that holds them (no duplicate taken in, none terminated) and settled by its acknowledgement; a successor gets them."""
from __future__ import annotations

import asyncio

from waiting import until, until_answered
from yeto.schemas.subjects import FRAG_STREAM, fragment_subject
from yeto.services.syncer.held import Held
from yeto.services.syncer.takeover import ACK_WAIT_S, KEEP_S, FirstPushes


async def test_held_pushes_kept_alive_are_never_redelivered_and_a_stale_holder_lets_them_go(bus, run_id):
    durable = f"held-{run_id[-6:]}"
    filters = [fragment_subject(run_id, 0, "*")]
    consumer = await bus.consumer(filters, durable=durable, ack_wait_s=ACK_WAIT_S, max_deliver=64)
    held, fresh = Held(), [True]
    held.fresh = lambda: fresh[0]
    pushes = FirstPushes(consumer, "syncer", held)
    await bus.publish_raw(fragment_subject(run_id, 0, "l0"), b"a push")
    [msg] = await until_answered(lambda: pushes.fetch(1, timeout_s=1.0), 30, "the push delivered")
    held.hold(run_id, 0, msg)                       # its round waits for another learner's push

    kept, keep_alive, stop = [], held.keep_alive, asyncio.Event()

    async def counted() -> None:
        await keep_alive()
        kept.append(fresh[0])
    held.keep_alive = counted
    keeping = asyncio.create_task(held.keep(KEEP_S, stop))
    delivered: list = []

    async def fetching() -> None:
        while not stop.is_set():
            delivered.extend(await pushes.fetch(8, timeout_s=0.5))
    fetcher = asyncio.create_task(fetching())
    laps = int(3 * ACK_WAIT_S / KEEP_S)             # three ack waits of keep-alives
    await until(lambda: len(kept) >= laps, 10 * ACK_WAIT_S, f"{laps} keep-alives")
    assert delivered == [] and pushes.redelivered == 0, "a push kept alive was delivered again"
    assert (await bus.js.consumer_info(FRAG_STREAM, durable)).num_redelivered == 0

    fresh[0] = False                                # the lease not renewed lately: no more keep-alives
    await until(lambda: pushes.redelivered >= 1, 10 * ACK_WAIT_S, "the stale holder's push delivered again")
    assert delivered == [], "a push held here was taken in twice"
    assert held.holds(msg.seq)
    stop.set()
    await keeping
    await fetcher
    await held.release(run_id, 0)                   # its round merged: the held copy's ack settles the redelivery
    assert not held.holds(msg.seq)
    info = await until_answered(lambda: _settled(bus, durable), 30, "nothing pending on the consumer")
    assert info.num_ack_pending == 0 and info.num_redelivered == 0


async def test_a_successor_on_the_same_consumer_gets_the_pushes_a_dead_holder_held_after_the_ack_wait(bus, run_id):
    durable = f"succ-{run_id[-6:]}"
    filters = [fragment_subject(run_id, 0, "*")]
    old = FirstPushes(await bus.consumer(filters, durable=durable, ack_wait_s=ACK_WAIT_S), "syncer", Held())
    await bus.publish_raw(fragment_subject(run_id, 0, "l0"), b"a push")
    [first] = await until_answered(lambda: old.fetch(1, timeout_s=1.0), 30, "the push delivered")
    old.held.hold(run_id, 0, first)                 # then the holder dies: no keep-alive, no ack
    new = FirstPushes(await bus.consumer(filters, durable=durable, ack_wait_s=ACK_WAIT_S), "syncer-standby", Held())
    [again] = await until_answered(lambda: new.fetch(1, timeout_s=1.0), 10 * ACK_WAIT_S, "the push delivered again")
    assert (again.seq, again.data, new.redelivered) == (first.seq, b"a push", 0)
    await again.ack()


async def _settled(bus, durable: str):
    info = await bus.js.consumer_info(FRAG_STREAM, durable)
    return info if info.num_ack_pending == 0 else None
