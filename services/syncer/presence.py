"""A standby's presence on the bus, so that a standby lost with its VM is replaced (infra/stack/standby.py).

While a leased syncer waits for its shard's lease it writes who it is every PRESENT_S to `<the lease's subject>.standby`
(the lease's stream keeps the newest). Each head node's supervisor watches that subject's sequence: unchanged for
LAPSE_S while the lease's holder lives, the shard has no standby left, and the node running none of its syncers
starts one, as after a takeover.
"""
from __future__ import annotations

import asyncio
import json
import logging

from yeto.services.syncer.lease import PREFIX, STREAM, Lease

log = logging.getLogger(__name__)
SUFFIX = "standby"      # infra/stack/standby.py reads the subjects ending in it
PRESENT_S = 1.0


def subject(name: str) -> str:
    """The presence subject of the shard whose durable fragment consumer is `name`."""
    return f"{PREFIX}.{name}.{SUFFIX}"


async def present(lease: Lease) -> None:
    """Until cancelled (the lease taken): every PRESENT_S, this syncer and its node stand by for the lease's shard."""
    from yeto.infra.bus.nats_bus import retryable

    body = json.dumps({"standby": lease.holder, "node": lease.node}).encode()
    while True:
        try:
            await lease.js.publish(subject(lease.name), body, stream=STREAM, timeout=PRESENT_S)
        except Exception as e:  # noqa: BLE001 - an election (the next write says it); anything else is logged
            if not retryable(e):
                log.warning("syncer %s: its presence as a standby not written: %r", lease.holder, e)
        await asyncio.sleep(PRESENT_S)      # a heartbeat: its absence is what is watched
