"""What a leased syncer logs of its first pushes once it holds the shard: the takeover's phases, measured
(tests/cloud/takeover_phases.py reads them from the log)."""
from __future__ import annotations

import logging

from yeto.schemas.subjects import learner_of_fragment

log = logging.getLogger(__name__)


class FirstPushes:
    """The shard's fragment consumer, logging the first push of each learner it delivers (once per learner)."""

    def __init__(self, consumer, instance: str):
        self._consumer, self.instance, self.seen = consumer, instance, set[str]()

    async def fetch(self, max_msgs: int, timeout_s: float):
        batch = await self._consumer.fetch(max_msgs, timeout_s)
        for msg in batch:
            if (learner := learner_of_fragment(msg.subject)) not in self.seen:
                self.seen.add(learner)
                log.info("syncer %s: first push of %s received (stream sequence %d)", self.instance, learner, msg.seq)
        return batch

    def __getattr__(self, name: str):
        return getattr(self._consumer, name)
