"""A learner's own events are believed only on their own subject: a real finalizer rejects (MessageRejected, not
folded) progress, a final ack or a layout whose payload names another learner than its subject's token, one on a
subject with no learner, and another type of event on a learner's progress subject; the genuine ones fold. What a
learner credential may publish is in test_security_bus.py (the server refuses another learner's subject)."""
from __future__ import annotations

import asyncio

import pytest

from waiting import until
from yeto.infra.bus import connect, subject_of
from yeto.infra.bus.memory import MemoryBus
from yeto.infra.globals_reader import read_layout
from yeto.infra.runner import run_service
from yeto.schemas.base import SYSTEM_RUN, parse, to_bytes
from yeto.schemas.final import LearnerFinalAck, RunFailed
from yeto.schemas.fleet import RunLaunched
from yeto.schemas.layout import LayoutDeclared, TensorEntry
from yeto.schemas.subjects import event_subject, learner_event_subject, snapshot_subject
from yeto.schemas.training import LearnerProgress
from yeto.services.finalizer import state as finalizer_state
from yeto.services.finalizer import wiring as finalizer_wiring

pytestmark = [pytest.mark.timeout(120), pytest.mark.own_nats_server]   # the finalizer's durable and snapshot are its own

SPEC = {"cloud": "local", "gpu": "cpu", "count": 2, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}
RECIPE = {"train": {"model": "m"}, "limits": {}, "final_ack_timeout_s": 600, "recover_timeout_s": 600}


def _progress(run_id: str, learner: str, step: int) -> LearnerProgress:
    return LearnerProgress(id=f"{run_id}-{learner}-{step}", run_id=run_id, source=learner, learner=learner, step=step,
                           loss=1.0, tokens=step * 10, tokens_per_s=1.0, step_time_s=0.1, lr=1e-4)


def _layout(run_id: str, learner: str, fingerprint: str) -> LayoutDeclared:
    return LayoutDeclared(id=f"{run_id}-{learner}-layout-{fingerprint[:4]}", run_id=run_id, source=learner, learner=learner,
                          fingerprint=fingerprint, num_fragments=1,
                          tensors=[TensorEntry(name="w", shape=[2], dtype="float32", fragment=0)])


def test_a_learners_own_event_goes_on_its_own_subject_and_others_keep_theirs():
    assert subject_of(_progress("r1", "island-1", 3)) == "yeto.evt.r1.LearnerProgress.island-1"
    ack = LearnerFinalAck(id="a", run_id="r1", source="island-0", learner="island-0", versions={0: 1})
    assert subject_of(ack) == learner_event_subject("r1", "LearnerFinalAck", "island-0")
    assert subject_of(_layout("r1", "island-2", "ab" * 32)) == "yeto.evt.r1.LayoutDeclared.island-2"
    assert subject_of(RunFailed(run_id="r1", reason="x")) == event_subject("r1", "RunFailed")


async def test_forged_learner_claims_are_rejected_by_a_real_service_and_the_genuine_ones_fold(nats_server, tmp_path, run_id):
    bus = await connect(nats_server.url, name="attacker")     # an operator/service connection: the server lets it publish
    rejected: list = []
    changed = asyncio.Event()

    async def on_rejected(d) -> None:
        rejected.append(parse(d.data))
        changed.set()
    watch = await bus.watch(event_subject(SYSTEM_RUN, "MessageRejected"), on_rejected, deliver="new")
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(finalizer_wiring.spec(tmp_path, tick_s=3600), nats_server.url,
                                           instance="finalizer", stop=stop, ready=ready))
    try:
        await until(lambda: ready.is_set() or task.done(), 60, "the finalizer to be ready")
        assert not task.done(), task
        await bus.publish(RunLaunched(id=f"{run_id}-launched", run_id=run_id, source="launcher", fleet=[SPEC], recipe=RECIPE))
        one, zero = "island-1", "island-0"
        ack_as_zero = LearnerFinalAck(id=f"{run_id}-forged-ack", run_id=run_id, source=one, learner=zero, versions={0: 1})
        forged = {   # island-1's subject (all its credential may publish) carrying island-0's claims, and worse
            "progress as another learner": (learner_event_subject(run_id, "LearnerProgress", one), _progress(run_id, zero, 99)),
            "final ack as another learner": (learner_event_subject(run_id, "LearnerFinalAck", one), ack_as_zero),
            "layout as another learner": (learner_event_subject(run_id, "LayoutDeclared", one), _layout(run_id, zero, "ee" * 32)),
            "no learner in the subject": (event_subject(run_id, "LearnerFinalAck"),
                                          ack_as_zero.model_copy(update={"id": f"{run_id}-bare-ack"})),
            "another type on a progress subject": (learner_event_subject(run_id, "LearnerProgress", one),
                                                   RunFailed(id=f"{run_id}-forged-fail", run_id=run_id, source=one, reason="x")),
        }
        # island-1's own, genuine events go first: the finalizer folds its stream in order, so once the last forged
        # one is rejected these are folded too (published after them, the stop below could come before their fold)
        await bus.publish(_progress(run_id, one, 5))
        await bus.publish(LearnerFinalAck(id=f"{run_id}-ack-1", run_id=run_id, source=one, learner=one, versions={0: 1}))
        seqs = {why: await bus.publish_raw(subject, to_bytes(event), msg_id=event.id) for why, (subject, event) in forged.items()}
        def each_forged_one_rejected() -> list:
            hit = [r for r in rejected if r.consumer == "finalizer" and r.stream_seq in seqs.values()]
            return hit if len(hit) >= len(seqs) else []
        mine = await until(each_forged_one_rejected, 60, "a rejection of each forged event", changed=changed,
                           detail=lambda: str([(r.consumer, r.stream_seq, r.reason) for r in rejected]))
        assert {r.stream_seq for r in mine} == set(seqs.values())
        assert all(r.reason.startswith("subject: ") and "belongs on" in r.reason for r in mine), [r.reason for r in mine]
        assert {r.subject for r in mine} == {subject for subject, _ in forged.values()}
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        await watch.close()
    assert task.exception() is None
    snapshot = await bus.last(snapshot_subject("finalizer"))            # what it folded, saved as it stopped
    await bus.close()
    assert snapshot is not None
    run = finalizer_state.load(snapshot[1])[run_id]
    assert run.acks == frozenset({"island-1"}), "island-1's ack folded; the acks it forged for island-0 did not"
    assert set(run.view.learners) == {"island-1"} and run.view.learners["island-1"].step == 5
    assert run.phase == "training" and not run.view.ended, "a RunFailed on a progress subject ended nothing"


@pytest.mark.parametrize("kind", ["nats", "memory"])
async def test_the_finalizer_still_finds_a_learners_layout_on_its_learner_subject(nats_server, run_id, kind):
    bus = await connect(nats_server.url, name="reader") if kind == "nats" else MemoryBus()
    try:
        await bus.publish(_layout(run_id, "island-0", "ab" * 32))
        await bus.publish(_layout(run_id, "island-1", "cd" * 32))
        assert (await read_layout(bus, run_id)).fingerprint == "cd" * 32, "the newest of any learner's"
    finally:
        await bus.close()
