"""A learner whose bus lags its pushes loses none of its progress: a push of a fragment made while the fragment's earlier
push still waits in the outbox (a server away, a bus thread starved of CPU) takes it back and carries its progress, so
what reaches the syncer sums to what was trained. The outbox used to drop the waiting push for the newer one, which
carries only the progress since it (learners/diloco_sync.py): a 1 s stop of a local stack's nats-server 0.3 s into a
300-step one-island run lost 40% of the run's pushed tokens (found while chasing tests/lineage's rare failure)."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest

from yeto.infra.bus.memory import MemoryBus
from yeto.learners.diloco_sync import DilocoSync
from yeto.learners.transport.outbox import Outbox
from yeto.learners.transport.protocol import LocalTransport
from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import fragment_subject

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from test_training_simulation import SHAPES, DictArrays

pytestmark = pytest.mark.timeout(300)     # q4: numba compiles its kernels on a fresh install
STEPS, TOKENS = 40, 100


class Lagging(LocalTransport):
    """NatsTransport's outbox with a bus that sends nothing until `drain`: no global ever lands meanwhile."""

    def __init__(self) -> None:
        self.outbox, self.bus = Outbox(), MemoryBus()

    def send_push(self, header, payload):
        self.outbox.put_push(header, payload)

    def take_back(self, fragment):
        return self.outbox.take_back(fragment)

    def poll_globals(self):
        return []

    def drain(self) -> None:
        async def run() -> None:
            while await self.outbox.send_one(self.bus):
                pass
        asyncio.run(run())


def arrived(bus: MemoryBus, run_id: str, fragment: int, learner: str) -> list[tuple[FragmentHeader, bytes]]:
    subject, stream = fragment_subject(run_id, fragment, learner), bus.stream(fragment_subject(run_id, fragment, learner))
    return [(FragmentHeader.from_nats(h), bytes(data)) for s in sorted(stream.msgs)
            for at, data, h in [stream.msgs[s]] if at == subject]


@pytest.mark.parametrize("codec", ["f32", "q4"])
def test_pushes_made_while_the_bus_is_away_reach_the_syncer_with_all_the_progress_trained(codec):
    rng = np.random.default_rng(0)
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    config = SyncConfig(num_fragments=2, inner_steps=4, codec_up=codec)
    sync = DilocoSync(DictArrays(init), config, run_id="r", learner="island-0")
    start = {p: sync._flat(p) for p in sync.active}
    transport = Lagging()
    for step in range(1, STEPS + 1):
        for value in sync.arrays.values.values():
            value += 0.01 * rng.standard_normal(value.shape).astype(np.float32)
        sync.step_boundary(step, TOKENS, transport)
    for push in sync.final_pushes(transport.take_back):
        transport.send_push(push.header, push.payload)
    transport.drain()

    for p in sync.active:
        pushes = arrived(transport.bus, "r", p, "island-0")
        assert [h.local_step for h, _ in pushes] == [STEPS], "each push took the waiting one back: the last goes out"
        assert sum(h.c_steps for h, _ in pushes) == STEPS and sum(h.c_tokens for h, _ in pushes) == STEPS * TOKENS
        got = sum(codecs.codec(h.codec).decode(payload, h.numel) for h, payload in pushes)
        trained = sync._flat(p) - start[p]
        residual = sync.feedback.residuals[p] if sync.feedback else 0.0     # q4's error feedback: the next push's
        np.testing.assert_allclose(got + residual, trained, atol=1e-5)


def test_a_push_already_on_its_way_is_not_folded_and_the_next_carries_only_what_came_after_it():
    rng = np.random.default_rng(1)
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    sync = DilocoSync(DictArrays(init), SyncConfig(num_fragments=1, inner_steps=4, codec_up="f32"), run_id="r",
                      learner="island-0")
    start = sync._flat(0)
    transport = Lagging()
    for step in range(1, 13):
        for value in sync.arrays.values.values():
            value += 0.01 * rng.standard_normal(value.shape).astype(np.float32)
        sync.step_boundary(step, TOKENS, transport)
        if step == 4:
            transport.drain()                 # the push of step 4 went out; those of 8 and 12 wait, 12 folds 8 in
    transport.drain()
    pushes = arrived(transport.bus, "r", 0, "island-0")
    assert [h.local_step for h, _ in pushes] == [4, 12] and [h.c_steps for h, _ in pushes] == [4, 8]
    np.testing.assert_allclose(sum(np.frombuffer(payload, np.float32) for _, payload in pushes), sync._flat(0) - start,
                               atol=1e-5)
