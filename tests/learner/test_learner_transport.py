"""The parts of the learner's NATS transport, over the in-memory bus: the outbox sends every push in order, events
first, and gives back a push not on its way yet; a keyframe is fetched once asked for and fully announced; progress is
rate-limited with its tokens accumulated; the final watch takes the run's final versions. (The whole
NatsTransport on a real nats-server is in test_learner_keyframes.py.)"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from yeto.infra.bus.memory import MemoryBus
from yeto.learners.transport.final import FinalWatch
from yeto.learners.transport.keyframes import KeyframeIndex, fetch
from yeto.learners.transport.outbox import Outbox
from yeto.learners.transport.reports import Reports
from yeto.schemas.base import parse, to_bytes
from yeto.schemas.final import CheckpointMarkedFinal
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.progress import MAX_STEPS_PER_REPORT
from yeto.schemas.subjects import event_subject, fragment_subject, keyframe_subject

pytestmark = pytest.mark.timeout(30)


def push(fragment: int, step: int) -> tuple[FragmentHeader, bytes]:
    payload = b"x" * 20                              # f32 of 5 parameters
    return FragmentHeader(run_id="r", learner="l0", fragment=fragment, local_step=step, codec="f32", numel=5,
                          sha256=sha256(payload)), payload


@dataclass
class Step:
    step: int
    loss: float = 1.0
    tokens: int = 100
    seconds: float = 0.1
    lr: float = 1e-3


def reports() -> Reports:
    return Reports(run_id="r", learner="l0", generation=0, progress_every_s=2.0, started_at=0.0)


def test_every_push_goes_out_in_order_unless_taken_back_and_events_go_first():
    bus, outbox = MemoryBus(), Outbox()
    outbox.put_push(*push(0, 4))
    outbox.put_push(*push(1, 6))
    outbox.put_push(*push(0, 8))
    outbox.put_push(*push(0, 12))
    taken = outbox.take_back(0)                      # the learner folds it into the push it makes now
    assert taken is not None and taken[0].local_step == 12
    outbox.put_event(reports().final_ack({0: 3}))

    async def drain() -> int:
        sent = 0
        while await outbox.send_one(bus):
            sent += 1
        return sent
    assert asyncio.run(drain()) == 4 and not outbox.pending()
    frag = bus.stream(fragment_subject("r", 0))
    steps = [(FragmentHeader.from_nats(h).fragment, FragmentHeader.from_nats(h).local_step)
             for _, _, h in (frag.msgs[s] for s in sorted(frag.msgs))]
    assert steps == [(0, 4), (1, 6), (0, 8)], "oldest first, none dropped for a newer one; step 12 taken back"
    assert outbox.bytes_sent == 60
    assert outbox.take_back(0) is None
    events = [parse(data) for subject, data, _ in bus.stream("yeto.evt.r.LearnerFinalAck").msgs.values()]
    assert [e.type for e in events] == ["LearnerFinalAck"]


class Refusing(MemoryBus):
    """The in-memory bus whose first push chunk fails after the training thread asked to take that push back."""

    def __init__(self, outbox: Outbox) -> None:
        super().__init__()
        self.outbox, self.taken, self.failed = outbox, [], False

    async def publish_raw(self, subject, payload, *, msg_id=None, headers=None, retry_for: float = 2.0) -> int:
        self.taken.append(self.outbox.take_back(FragmentHeader.from_nats(headers).fragment))
        if not self.failed:
            self.failed = True
            raise ConnectionError("server away")
        return await super().publish_raw(subject, payload, msg_id=msg_id, headers=headers, retry_for=retry_for)


def test_a_push_on_its_way_is_never_taken_back_even_after_its_send_failed():
    outbox = Outbox()
    outbox.put_push(*push(0, 4))
    bus = Refusing(outbox)
    assert not asyncio.run(outbox.send_one(bus)) and outbox.pending()     # failed: it stays, and is sent again whole
    assert outbox.take_back(0) is None, "a chunk of it may be in the stream: sent whole, never folded into another"
    assert asyncio.run(outbox.send_one(bus)) and not outbox.pending()
    assert bus.taken == [None, None] and len(bus.stream(fragment_subject("r", 0)).msgs) == 1


def test_a_keyframe_is_fetched_once_asked_for_and_every_chunk_announced_and_older_versions_are_forgotten():
    index = KeyframeIndex()
    h = FragmentHeader(run_id="r", fragment=2, kind="keyframe", version=5, numel=4, num_chunks=2)
    assert index.announce(h, 11) is None                               # not asked for
    assert index.want((2, 5)) is None                                  # chunk 1 not announced yet
    assert index.announce(h.model_copy(update={"chunk": 1}), 12) == {0: 11, 1: 12}
    assert index.announce(h, 11) is None, "announced again (a watch re-created): not fetched twice"
    newer = h.model_copy(update={"version": 6, "num_chunks": 1})
    assert index.announce(newer, 13) is None
    assert (2, 5) not in index.announced and (2, 6) in index.announced


def test_fetch_delivers_each_chunk_in_order_and_stops_at_a_chunk_the_stream_no_longer_holds():
    bus = MemoryBus()

    async def run() -> list[bytes]:
        seqs = {c: await bus.publish_raw(keyframe_subject("r", 0, c), bytes([c]) * 3, headers={"c": str(c)}) for c in range(3)}
        got: list[bytes] = []
        await fetch(bus, "r", 0, seqs, lambda headers, data: got.append(data))
        assert got == [b"\0\0\0", b"\1\1\1", b"\2\2\2"]
        got.clear()
        await fetch(bus, "r", 0, {0: seqs[0], 1: 10_000, 2: seqs[2]}, lambda h, d: got.append(d))
        return got
    assert asyncio.run(run()) == [b"\0\0\0"]


def test_progress_is_rate_limited_yet_carries_every_step_and_close_reports_the_steps_held_back():
    r = reports()
    first = r.progress(Step(1), now=10.0)
    assert first is not None and first.step == 1 and first.tokens == 100 and [s.step for s in first.steps] == [1]
    assert r.progress(Step(2), now=11.0) is None                       # within 2 s of the last report
    third = r.progress(Step(3), now=12.5)
    assert third.step == 3 and third.tokens == 300
    assert [(s.step, s.tokens, s.tokens_per_s, s.lr) for s in third.steps] == [(2, 100, 1000.0, 1e-3), (3, 100, 1000.0, 1e-3)]
    assert r.unreported(now=12.6) is None
    assert r.progress(Step(4), now=13.0) is None
    last = r.unreported(now=13.1)
    assert last.step == 4 and last.tokens == 400 and [s.step for s in last.steps] == [4]
    assert r.unreported(now=13.2) is None


def test_a_learner_faster_than_the_rate_limit_sends_full_batches_and_loses_no_step():
    r = reports()
    events = [e for i in range(1, 2 * MAX_STEPS_PER_REPORT + 11) if (e := r.progress(Step(i), now=10.0)) is not None]
    events.append(r.unreported(now=10.0))
    assert [len(e.steps) for e in events] == [1, MAX_STEPS_PER_REPORT, MAX_STEPS_PER_REPORT, 9]   # all at one instant
    assert [s.step for e in events for s in e.steps] == list(range(1, 2 * MAX_STEPS_PER_REPORT + 11))
    assert max(len(to_bytes(e)) for e in events) < 64 << 10      # far under the tape's cap for one event


def test_the_started_event_takes_the_backends_description_and_leaves_the_rest_to_the_start_line():
    how = {"backend": "torch", "ranks": 2, "shard": "FSDP2", "tuning": "lora", "dtype": "bfloat16", "quantization": "none",
           "device": "cuda", "trainable": 10, "parameters": 100, "checkpointing": True}
    event = reports().started(how)
    assert event.type == "LearnerStarted" and event.learner == "l0" and event.shard == "FSDP2" and event.trainable == 10
    assert parse(to_bytes(event)) == event


def test_the_final_watch_takes_the_versions_of_checkpoint_marked_final_and_ignores_other_events():
    async def run() -> FinalWatch:
        bus, final, seen = MemoryBus(), FinalWatch(), asyncio.Event()

        async def on_marked(delivery) -> None:
            await final.on_marked(delivery)
            seen.set()
        await bus.watch(event_subject("r", "CheckpointMarkedFinal"), on_marked)
        assert final.versions() is None
        await bus.publish(CheckpointMarkedFinal(run_id="r", source="finalizer", versions={0: 7, 1: 6},
                                                snapshot_path="s", sha256="x"))
        await asyncio.wait_for(seen.wait(), 5)
        return final
    assert asyncio.run(run()).versions() == {0: 7, 1: 6}
