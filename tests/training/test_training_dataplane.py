"""The syncer's data plane over the in-memory bus (the same protocol as NATS): pushes are acknowledged only
once their round has merged, snapshotted and broadcast; the final cut merges what is in and reports."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.infra.bus_memory import MemoryBus
from yeto.schemas import codecs, parse
from yeto.schemas.final import FinalCutDone, FinalCutRequested
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.schemas.subjects import delta_subject, event_subject, fragment_subject, keyframe_subject
from yeto.services.syncer import snapshot
from yeto.services.syncer.dataplane import DataPlane
from yeto.services.syncer.final_cut import final_cut
from yeto.services.syncer.runs import RunInfo

RUN, N, FP = "r-dp", 3000, "d" * 64
SYNC = {"quorum": 2, "grace_max_s": 0.0}


async def send(bus: MemoryBus, learner: str, kind: str, codec: str, values: np.ndarray, **fields) -> None:
    payload = codecs.encode(codec, values)
    header = FragmentHeader(run_id=RUN, learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=N,
                            sha256=sha256(payload), **fields)
    for h, chunk in split_chunks(header, payload, chunk_bytes=1024):
        await bus.publish_raw(fragment_subject(RUN, 0, learner), chunk, headers=h.to_nats())


async def events_of(bus: MemoryBus, type_: str) -> list:
    return [parse(data) for _, (_, data, _) in sorted(bus.stream(event_subject(RUN, type_)).msgs.items())
            if parse(data).type == type_]


@pytest.mark.timeout(60)
async def test_pushes_are_acknowledged_after_their_round_is_snapshotted_and_broadcast(tmp_path):
    bus, plane = MemoryBus(), DataPlane(state_dir=tmp_path)
    runs = {RUN: RunInfo(sync=SYNC, generations={"l0": 0, "l1": 0})}     # both announced by the launcher
    init = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    for learner in ("l0", "l1"):
        await send(bus, learner, "init", "f32", init)
    await send(bus, "l0", "push", "q4", np.full(N, 0.1, np.float32), local_step=4, c_tokens=10)
    await plane.open(bus)
    sent = len(bus.stream(fragment_subject(RUN, 0)).msgs)       # two inits and a push, in 1 KiB chunks
    assert await plane.take_in(bus, lambda: runs, timeout_s=0) == sent > 3
    assert len(bus.stream(fragment_subject(RUN, 0)).msgs) == sent, "held while their round is open"
    await send(bus, "l1", "push", "q4", np.full(N, 0.3, np.float32), local_step=4, c_tokens=30)
    assert await plane.take_in(bus, lambda: runs, timeout_s=0) == 2

    assert [(e.global_version, e.responders) for e in await events_of(bus, "RoundMerged")] == [(1, ["l0", "l1"])]
    assert not bus.stream(fragment_subject(RUN, 0)).msgs, "every chunk is acknowledged once the round merged"
    assert [e.versions for e in await events_of(bus, "SnapshotWritten")] == [{0: 0}, {0: 1}]
    assert snapshot.read_all(tmp_path / "syncer" / RUN)[0].version == 1
    headers, _ = await bus.last(delta_subject(RUN, 0, 0))
    assert FragmentHeader.from_nats(headers).version == 1

    await send(bus, "l0", "push", "q4", np.full(N, 0.2, np.float32), local_step=8, base_version=1, c_tokens=10)
    await plane.take_in(bus, lambda: runs, timeout_s=0)
    await final_cut(plane, bus, FinalCutRequested(run_id=RUN, reason="user"), SYNC)    # quorum or not, l0's push merges
    done = await events_of(bus, "FinalCutDone")
    assert len(done) == 1 and isinstance(done[0], FinalCutDone) and done[0].versions == {0: 2}
    assert not bus.stream(fragment_subject(RUN, 0)).msgs
    headers, payload = await bus.last(keyframe_subject(RUN, 0, 0))
    exact = codecs.encode("f32", plane.cores[RUN].fragments[0].theta)
    assert FragmentHeader.from_nats(headers).codec == "f32" and exact.startswith(payload)
