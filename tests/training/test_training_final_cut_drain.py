"""The final cut waits for the learners' last pushes while the syncer cannot take them in yet (its run's kernels still
compiling, services/syncer/warmup.py): its bound counts only time in which they could have been taken in."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from test_training_dataplane import RUN, SYNC, N, events_of, send
from yeto.infra.bus.memory import MemoryBus
from yeto.schemas.final import FinalCutRequested
from yeto.schemas.subjects import fragment_subject
from yeto.services.syncer import warmup
from yeto.services.syncer.dataplane import DataPlane
from yeto.services.syncer.final_cut import drain, final_cut
from yeto.services.syncer.runs import RunInfo

BOUND_S = 0.5
COMPILING_POLLS = 20      # the drain's polls (0.1 s apart) while the kernels compile: four times its bound


async def started(tmp_path) -> tuple[MemoryBus, DataPlane, dict[str, RunInfo]]:
    """A data plane holding version 0 of the run's fragment, from l0's and l1's inits."""
    bus, plane = MemoryBus(), DataPlane(state_dir=tmp_path)
    runs = {RUN: RunInfo(sync=SYNC, generations={"l0": 0, "l1": 0})}
    init = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    for learner in ("l0", "l1"):
        await send(bus, learner, "init", "f32", init)
    await plane.open(bus)
    await plane.take_in(bus, lambda: runs, timeout_s=0)
    return bus, plane, runs


@pytest.mark.timeout(60)
async def test_the_cut_takes_in_pushes_that_wait_on_compiling_kernels_past_the_drains_bound(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(warmup, "_DONE", {warmup._key(SYNC)})        # this run's warm-up started and runs on
    monkeypatch.setattr(warmup, "_READY", set())
    bus, plane, runs = await started(tmp_path)
    assert plane.cores[RUN].fragments[0].version == 0
    await send(bus, "l0", "push", "q4", np.full(N, 0.1, np.float32), local_step=4, c_tokens=10)   # the last push

    assert plane.consumer is not None
    pending, polls = plane.consumer.num_pending, []

    async def counted() -> int:
        polls.append(1)
        if len(polls) == COMPILING_POLLS:         # the kernels are made: the data plane takes the push in
            warmup._READY.add(warmup._key(SYNC))
            await plane.take_in(bus, lambda: runs, timeout_s=0)
        return await pending()

    monkeypatch.setattr(plane.consumer, "num_pending", counted)
    with caplog.at_level(logging.WARNING, logger="yeto.services.syncer.final_cut"):
        await drain(plane, RUN, SYNC, timeout_s=BOUND_S)
    assert len(polls) >= COMPILING_POLLS, f"the drain gave up after {len(polls)} polls while the kernels compiled"
    assert "pushes still unread" not in caplog.text
    assert await pending() == 0

    await final_cut(plane, bus, FinalCutRequested(run_id=RUN, reason="user"), SYNC)
    (done,) = await events_of(bus, "FinalCutDone")
    assert done.versions == {0: 1}, "the last push merged in the cut"
    assert [e.responders for e in await events_of(bus, "RoundMerged")] == [["l0"]]
    assert not bus.stream(fragment_subject(RUN, 0)).msgs


@pytest.mark.timeout(60)
async def test_the_cut_waits_for_a_push_nakd_until_its_learner_is_announced(tmp_path, caplog):
    """A last push that came before the syncer saw its learner's IslandUp (the events lag while a compile holds the
    GIL) is nak'ed for a retry: JetStream counts it as neither pending nor taken until it comes back, so a drain that
    looked only at the pending count went on without it and the cut dropped it. It waits for the redelivery now."""
    bus, plane, runs = await started(tmp_path)
    await send(bus, "l2", "push", "q4", np.full(N, 0.1, np.float32), local_step=4, c_tokens=10)   # not announced yet
    await plane.take_in(bus, lambda: runs, timeout_s=0)
    assert plane.refusals.awaited(RUN) and not await events_of(bus, "LearnerRejected")
    runs[RUN].generations["l2"] = 0                    # its IslandUp reaches the syncer

    assert plane.consumer is not None
    pending, polls = plane.consumer.num_pending, []

    async def counted() -> int:                        # the data plane's loop, between the drain's polls
        polls.append(1)
        await plane.take_in(bus, lambda: runs, timeout_s=0)
        return await pending()

    plane.consumer.num_pending = counted               # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="yeto.services.syncer.final_cut"):
        await drain(plane, RUN, SYNC, timeout_s=10.0)
    assert "pushes still unread" not in caplog.text and not plane.refusals.awaited(RUN)
    assert len(polls) > 1, "the drain went on at its first poll, the nak'ed push not back yet"

    await final_cut(plane, bus, FinalCutRequested(run_id=RUN, reason="user"), SYNC)
    (done,) = await events_of(bus, "FinalCutDone")
    assert done.versions == {0: 1}, "the nak'ed push merged in the cut"
    assert [e.responders for e in await events_of(bus, "RoundMerged")] == [["l2"]]
