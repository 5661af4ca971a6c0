"""A leased syncer keeps the Raft leaders it merges through off its own VM, so that VM's loss costs the lease's lapse
and no election on the takeover's path (docs/CLUSTER.md).

Each stream (and the shard's durable fragment consumer) is a Raft group whose leader answers every request; a leader
lost with its node is replaced only after an election (1.9 to 7.0 s after a kill in the rehearsals). When
the holder's node led the lease, the pushes, the globals or the replicated snapshots, losing that node stopped the
takeover for that long after the lease lapsed (rehearsal at f4f4797: the fragment stream's new leader 6.7 s after the
kill). The holder asks every such group its node leads to step down (`$JS.API.STREAM.LEADER.STEPDOWN`, the consumer's
likewise): the new leader is elected among the other nodes while every node is up (a heartbeat, well under a
second). JetStream's meta leader (stream and consumer creation, the takeover's consumer delete) needs the system
account to be moved and is not.
"""
from __future__ import annotations

import asyncio
import logging

from yeto.infra.bus.snapshot_store import STREAM as FSNAP_STREAM
from yeto.schemas.subjects import FRAG_STREAM, GDELTA_STREAM, GKEY_STREAM
from yeto.services.syncer.lease import STREAM as LEASE_STREAM

log = logging.getLogger(__name__)

STREAMS = (LEASE_STREAM, FRAG_STREAM, GKEY_STREAM, GDELTA_STREAM, FSNAP_STREAM)
CHECK_S = 5.0           # how often the holder looks (a leader moves only when a node rejoins or an election ran)


async def led_by(js, node: str, durable: str) -> list[str]:
    """The step-down API subjects of the groups `node` leads among STREAMS and the consumer `durable`."""
    from nats.js.errors import NotFoundError

    subjects = []
    for stream in STREAMS:
        try:
            if (await js.stream_info(stream)).cluster.leader == node:
                subjects.append(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}")
        except NotFoundError:
            pass                            # not made yet (the replicated snapshots: at the first snapshot)
    try:
        if (await js.consumer_info(FRAG_STREAM, durable)).cluster.leader == node:
            subjects.append(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{FRAG_STREAM}.{durable}")
    except NotFoundError:
        pass
    return subjects


async def keep_off(bus, node: str, durable: str, stop: asyncio.Event) -> None:
    """Until stopped, every CHECK_S (the first after CHECK_S): each group `node` (this syncer's VM's server) leads is
    asked to step down."""
    from yeto.infra.bus.nats_bus import retryable

    while True:
        try:
            await asyncio.wait_for(stop.wait(), CHECK_S)   # first after a while: a takeover's first round goes out
            return                                         # before any leader moves
        except asyncio.TimeoutError:
            pass
        try:
            for subject in await led_by(bus.js, node, durable):
                await bus.nc.request(subject, b"", timeout=2.0)
                log.info("%s: led by %s, this syncer's node", subject.removeprefix("$JS.API."), node)
        except Exception as e:  # noqa: BLE001 - a step-down is an optimization: an election or a refusal is logged
            if not retryable(e):
                log.warning("keeping leaders off node %s: %r", node, e)
