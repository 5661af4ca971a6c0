"""The syncer's data plane over the in-memory bus (the same protocol as NATS): a round's broadcast goes out
before its snapshot is written, and its pushes are acknowledged only once that snapshot is durable; the
final cut merges what is in and reports."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from yeto.infra.bus.memory import MemoryBus
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
    payload = codecs.codec(codec).encode(values)
    header = FragmentHeader(run_id=RUN, learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=N,
                            sha256=sha256(payload), **fields)
    for h, chunk in split_chunks(header, payload, chunk_bytes=1024):
        await bus.publish_raw(fragment_subject(RUN, 0, learner), chunk, headers=h.to_nats())


async def events_of(bus: MemoryBus, type_: str) -> list:
    return [parse(data) for _, (_, data, _) in sorted(bus.stream(event_subject(RUN, type_)).msgs.items())
            if parse(data).type == type_]


@pytest.mark.timeout(60)
async def test_a_round_is_broadcast_before_its_snapshot_is_written_and_acknowledged_once_it_is_durable(tmp_path, monkeypatch):
    gate, write = threading.Event(), snapshot.write

    def gated_write(directory, snap):                  # the disk is slow: version 1's write waits for the test
        if snap.version >= 1:
            assert gate.wait(30), "the test never opened the gate"
        return write(directory, snap)

    monkeypatch.setattr(snapshot, "write", gated_write)
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
    assert [e.versions for e in await events_of(bus, "SnapshotWritten")] == [{0: 0}], "version 0 durable before it went out"
    await send(bus, "l1", "push", "q4", np.full(N, 0.3, np.float32), local_step=4, c_tokens=30)
    assert await plane.take_in(bus, lambda: runs, timeout_s=0) == 2

    assert [(e.global_version, e.responders) for e in await events_of(bus, "RoundMerged")] == [(1, ["l0", "l1"])]
    headers, _ = await bus.last(delta_subject(RUN, 0, 0))
    assert FragmentHeader.from_nats(headers).version == 1, "the broadcast does not wait for the snapshot"
    assert [e.versions for e in await events_of(bus, "SnapshotWritten")] == [{0: 0}]
    assert len(bus.stream(fragment_subject(RUN, 0)).msgs) == sent + 2, "the round's messages wait for its snapshot"
    gate.set()
    await plane.settle()
    assert not bus.stream(fragment_subject(RUN, 0)).msgs, "every chunk is acknowledged once the snapshot is durable"
    assert [e.versions for e in await events_of(bus, "SnapshotWritten")] == [{0: 0}, {0: 1}]
    assert snapshot.read_all(tmp_path / "syncer" / RUN)[0].version == 1

    await send(bus, "l0", "push", "q4", np.full(N, 0.2, np.float32), local_step=8, base_version=1, c_tokens=10)
    await plane.take_in(bus, lambda: runs, timeout_s=0)
    await final_cut(plane, bus, FinalCutRequested(run_id=RUN, reason="user"), SYNC)    # quorum or not, l0's push merges
    done = await events_of(bus, "FinalCutDone")
    assert len(done) == 1 and isinstance(done[0], FinalCutDone) and done[0].versions == {0: 2}
    assert not bus.stream(fragment_subject(RUN, 0)).msgs
    headers, payload = await bus.last(keyframe_subject(RUN, 0, 0))
    exact = codecs.F32.encode(plane.cores[RUN].fragments[0].theta)
    assert FragmentHeader.from_nats(headers).codec == "f32" and exact.startswith(payload)


@pytest.mark.timeout(60)
async def test_a_successor_whose_snapshot_is_older_than_what_went_out_resumes_past_it_on_the_bus(tmp_path, monkeypatch):
    """The first syncer broadcast version 1 and died before its snapshot was durable; the successor (same state
    folder, same bus) restores version 0, reads version 1 off the global stream and resumes as version 2: a
    FragmentRestored event and a keyframe of version 2 before anything else of the run."""
    gate, write = threading.Event(), snapshot.write

    def stalled_write(directory, snap):               # version 1's write is in flight when the syncer dies
        if snap.version >= 1:
            assert gate.wait(30), "the test never opened the gate"
            return None, ""                            # and never lands
        return write(directory, snap)

    monkeypatch.setattr(snapshot, "write", stalled_write)
    bus, first = MemoryBus(), DataPlane(state_dir=tmp_path)
    runs = {RUN: RunInfo(sync=SYNC, generations={"l0": 0, "l1": 0})}
    init = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    for learner in ("l0", "l1"):
        await send(bus, learner, "init", "f32", init)
        await send(bus, learner, "push", "q4", np.full(N, 0.1, np.float32), local_step=4, c_tokens=10)
    await first.open(bus)
    await first.take_in(bus, lambda: runs, timeout_s=0)
    headers, _ = await bus.last(delta_subject(RUN, 0, 0))
    assert FragmentHeader.from_nats(headers).version == 1
    assert snapshot.read_all(tmp_path / "syncer" / RUN)[0].version == 0

    second = DataPlane(state_dir=tmp_path)               # the successor: the run's next message reaches it
    await send(bus, "l0", "push", "q4", np.full(N, 0.2, np.float32), local_step=8, base_version=1, c_tokens=10)
    await second.open(bus)
    await second.take_in(bus, lambda: runs, timeout_s=0)
    restored = await events_of(bus, "FragmentRestored")
    assert [(e.snapshot_version, e.published_version, e.global_version) for e in restored] == [(0, 1, 2)]
    headers, _ = await bus.last(keyframe_subject(RUN, 0, 0))
    assert FragmentHeader.from_nats(headers).version == 2
    merged = [(e.global_version, e.source) for e in await events_of(bus, "RoundMerged")]
    assert merged == [(1, "syncer"), (3, "syncer")], "the pushes never acknowledged merge again, past the leap"
    assert not [e for e in await events_of(bus, "LearnerRejected") if e.reason == "future_base"]
    gate.set()
    await first.settle()
