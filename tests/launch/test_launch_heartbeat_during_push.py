"""A learner's progress, the launcher's only sign that an island lives (services/launcher/liveness.py), is not held back
by a long push: the outbox sends the events queued meanwhile between the push's chunks, over the in-memory bus."""
from __future__ import annotations

import asyncio

import pytest

from yeto.infra.bus.memory import MemoryBus
from yeto.learners.transport.outbox import Outbox
from yeto.learners.transport.reports import Reports
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.subjects import CHUNK_BYTES

pytestmark = pytest.mark.timeout(30)


class Recording:
    """The in-memory bus, recording what goes out in order; while the first chunk is on its way the training thread
    queues a progress report (`during`)."""

    def __init__(self, outbox: Outbox, during) -> None:
        self.bus, self.outbox, self.during, self.sent = MemoryBus(), outbox, during, []

    async def publish(self, msg, *, retry_for: float = 2.0) -> int:
        self.sent.append(msg.type)
        return await self.bus.publish(msg, retry_for=retry_for)

    async def publish_raw(self, subject, payload, *, msg_id=None, headers=None, retry_for: float = 2.0) -> int:
        self.sent.append(f"chunk {FragmentHeader.from_nats(headers).chunk}")
        if len(self.sent) == 1:
            self.outbox.put_event(self.during)
        return await self.bus.publish_raw(subject, payload, msg_id=msg_id, headers=headers, retry_for=retry_for)


def test_a_report_queued_while_a_push_is_on_its_way_goes_out_before_the_pushs_next_chunk():
    numel = 3 * CHUNK_BYTES // 4                         # f32: three chunks
    payload = b"\0" * (4 * numel)
    outbox = Outbox()
    outbox.put_push(FragmentHeader(run_id="r", learner="island-0", fragment=0, local_step=8, codec="f32", numel=numel,
                                   sha256=sha256(payload)), payload)
    ack = Reports(run_id="r", learner="island-0", generation=0, progress_every_s=2.0, started_at=0.0).final_ack({0: 1})
    bus = Recording(outbox, ack)
    assert asyncio.run(outbox.send_one(bus)) and not outbox.pending()
    assert bus.sent == ["chunk 0", "LearnerFinalAck", "chunk 1", "chunk 2"]
