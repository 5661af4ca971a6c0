"""The shard's fragment consumer of a leased syncer, kept through a takeover (docs/CLUSTER.md).

The new holder binds the consumer its predecessor used: a pull from a consumer that exists needs only that consumer's
own Raft group leader, which the holder keeps off its VM (leaders.py), and not JetStream's meta leader, which a head
cannot move and which is elected anew for seconds when its VM is lost (deleting and making the consumer again waited
for it: 7.4 to 11.6 s to the first merged global in the rehearsals that lost it). The pushes the old holder fetched
and never acknowledged come back after the consumer's ack wait, ACK_WAIT_S since its last keep-alive (held.py `keep`,
every KEEP_S while its lease is fresh), which a holder that lives keeps from running out.

A consumer made with another ack wait (30 s before) is updated once its holder merges (`keep_ack_wait`): an update
needs the meta leader, so never on the takeover's path. Each redelivery counts towards the consumer's max_deliver (64):
a push is redelivered at a takeover, or when its holder's loop stalls past ACK_WAIT_S, which lapses its lease too.

The first pushes after holding the shard are logged (tests/cloud/takeover_phases.py reads them), and a push
redelivered while this holder holds it (held.py `holds`) is left out and counted.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging

from yeto.schemas.subjects import FRAG_STREAM, learner_of_fragment

log = logging.getLogger(__name__)
ACK_WAIT_S = 4.0        # the lease's lapse: a loop stalled this long loses the lease and its pushes alike
KEEP_S = 1.0            # the lease's renewal: a keep-alive every second, three may be lost before the ack wait runs out


class FirstPushes:
    """The shard's fragment consumer, logging the first push of each learner it delivers (once per learner) and
    leaving out a push redelivered while `held` holds it."""

    def __init__(self, consumer, instance: str, held):
        self._consumer, self.instance, self.held, self.seen = consumer, instance, held, set[str]()
        self.redelivered = 0                # pushes delivered again while held here

    async def fetch(self, max_msgs: int, timeout_s: float):
        fetched = await self._consumer.fetch(max_msgs, timeout_s)
        batch = [msg for msg in fetched if not self.held.holds(msg.seq)]
        if again := len(fetched) - len(batch):
            self.redelivered += again
            log.info("syncer %s: %d messages delivered again while held, left out (%d so far; keep-alives at most %.1fs "
                     "apart)", self.instance, again, self.redelivered, self.held.late)
        for msg in batch:
            if (learner := learner_of_fragment(msg.subject)) not in self.seen:
                self.seen.add(learner)
                log.info("syncer %s: first push of %s received (stream sequence %d)", self.instance, learner, msg.seq)
        return batch

    def __getattr__(self, name: str):
        return getattr(self._consumer, name)


async def keep_ack_wait(js, durable: str, stop: asyncio.Event) -> None:
    """The consumer `durable` updated to ACK_WAIT_S if it has another ack wait; asked again every second while
    JetStream's meta leader is elected, until done or stopped."""
    from yeto.infra.bus.nats_bus import retryable

    while not stop.is_set():
        try:
            config = (await js.consumer_info(FRAG_STREAM, durable)).config
            if config.ack_wait != ACK_WAIT_S:
                await js.add_consumer(FRAG_STREAM, config=dataclasses.replace(config, ack_wait=ACK_WAIT_S))
                log.info("consumer %s: ack wait %gs, was %gs", durable, ACK_WAIT_S, config.ack_wait)
            return
        except Exception as e:  # noqa: BLE001 - an election is asked again; a refusal leaves the ack wait it had
            if not retryable(e):
                log.warning("consumer %s: its ack wait not updated to %gs: %r", durable, ACK_WAIT_S, e)
                return
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
