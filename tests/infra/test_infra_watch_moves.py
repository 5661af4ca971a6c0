"""A watch whose connection moves to another server (a head replaced at a new address, a cluster node lost) is made
again there under its own name. nats-py re-creates an ordered consumer every two missed heartbeats, also while the
connection is away; a create made then went out once the client reached a server whose version it did not know yet,
on the nameless legacy subject, which a learner's permissions refuse: after a head moved, learners' watches went
silent for good and every push of theirs was refused as stale (infra/bus/nats_consumer.py)."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from test_infra_bus_contract import watched
from waiting import until
from yeto.infra.bus import connect
from yeto.infra.head import mirror, rendezvous
from yeto.infra.nats.server import NatsServer, ensure_streams
from yeto.learners.transport import rendezvous as follower
from yeto.schemas.subjects import EVT_STREAM, event_subject, run_events

pytestmark = pytest.mark.timeout(90)


async def test_a_watch_follows_its_connection_to_a_replacement_and_is_made_again_there_by_its_name(tmp_path, run_id):
    """The rendezvous names the replacement before it answers (its VM is still starting): the client tries that
    address while the watch's heartbeat check comes round, then the replacement starts, restores the run's events
    (same sequence numbers) and the watch must deliver what is published there after."""
    old, new = NatsServer(tmp_path / "old").start(), NatsServer(tmp_path / "new")
    bus = other = following = None
    try:
        bus = await connect(old.url)
        await ensure_streams(bus.js)
        await bus.publish_raw(event_subject(run_id, "Before"), b"1")
        seen, (sub, both) = await watched(bus, run_events(run_id), 2)
        creates = sent_creates(bus.nc)
        await until(lambda: len(seen) == 1, 20, "the watch to deliver the first event")
        output = str(tmp_path / "store" / "artifact")
        root, where = mirror.mirror_root(output, run_id), rendezvous.place(output, run_id)
        Path(root).mkdir(parents=True)
        rendezvous.publish(root, run_id, new.url, now=1.0)
        following = asyncio.ensure_future(follower.follow(bus.nc, where, run_id, old.url, follow_s=1.0, check_s=0.1))
        await asyncio.to_thread(old.stop)
        # Twenty tries of the replacement's address (0.25 s apart): the heartbeat check (every 2 s) comes round meanwhile.
        tried = lambda: [s.reconnects for s in bus.nc.server_pool if s.uri.port == new.port]  # noqa: E731
        await until(lambda: tried() and tried()[0] >= 20, 40, "the client to try the replacement's address twenty times")
        await asyncio.to_thread(new.start)
        other = await connect(new.url)
        await ensure_streams(other.js)
        await other.publish_raw(event_subject(run_id, "Before"), b"1")
        await until(lambda: bus.nc.is_connected and bus.nc.connected_url.port == new.port, 30,
                    "the connection to reach the replacement")
        await other.publish_raw(event_subject(run_id, "After"), b"2")
        await asyncio.wait_for(both.wait(), 30)   # made again after two missed heartbeats, once connected
        assert [d.data for d in seen] == [b"1", b"2"]
        names = [c.name async for c in consumers(other, EVT_STREAM)]
        assert names and all(n.startswith("watch-") for n in names), names    # every create carried its name
        assert creates and all(c.startswith(f"$JS.API.CONSUMER.CREATE.{EVT_STREAM}.watch-") for c in creates), creates
        await sub.close()
    finally:
        if following is not None:
            following.cancel()
        for b in (bus, other):
            if b is not None:
                await b.close()
        for s in (old, new):
            s.stop()


def sent_creates(nc) -> list[str]:
    """The consumer-create subjects the client sends from now on (what a server's permissions would judge)."""
    sent, publish = [], nc.publish

    async def spied(subject, *args, **kwargs):
        if subject.startswith("$JS.API.CONSUMER.CREATE"):
            sent.append(subject)
        return await publish(subject, *args, **kwargs)
    nc.publish = spied
    return sent


async def consumers(bus, stream: str):
    for info in await bus.js.consumers_info(stream):
        yield info
