"""The real syncer service, fed crafted pushes over the real bus: a learner with another layout is refused
with a LearnerRejected that says why, a corrupt chunk is refused, a push on another learner's subject is
refused, and a push replayed under another Nats-Msg-Id (what a learner's retry after a lost ack looks like)
is refused as a duplicate and merged once. The islands are announced as the launcher would (IslandUp).
Pushes are made by the learners' own protocol module (learners/diloco_sync.py) over NumPy arrays."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from dict_arrays import Arrays
from e2e_stack import Stack
from yeto.infra import stack
from yeto.infra.bus import Bus, connect
from yeto.learners.diloco_sync import DilocoSync, Push
from yeto.schemas.commands import LaunchRun
from yeto.schemas.fleet import IslandUp
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import fragment_subject

pytestmark = [pytest.mark.slow]
RUN = "admission"
# learner_timeout_s: the islands announced and never admitted (island-1, island-2) count as live while joining, for this
# long after the first chunk (services/syncer/liveness.py), so island-0's round, needing a majority of three, merges
# alone only then: at the default 60 s the test waited ~50 s on that window and nothing it asserts.
SYNC = {"num_fragments": 2, "inner_steps": 4, "learner_timeout_s": 10.0}
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": "", "spot": False}


def learner(name: str, shapes: dict[str, tuple], num_fragments: int = 2) -> DilocoSync:
    rng = np.random.default_rng(0)
    arrays = Arrays({k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()})
    return DilocoSync(arrays, SyncConfig(**{**SYNC, "num_fragments": num_fragments}), run_id=RUN, learner=name)


def first_push(sync: DilocoSync, fragment: int) -> Push:
    """Train a little (a drift of the arrays) until the schedule pushes `fragment`."""
    for step in range(1, 2 * SYNC["inner_steps"] + 1):
        for name in sync.arrays.names():
            sync.arrays.write(name, sync.arrays.read(name) + 0.01)
        pushes = [p for p in sync.after_step(step, tokens=100) if p.header.fragment == fragment]
        if pushes:
            return pushes[0]
    raise AssertionError(f"fragment {fragment} was never due")


async def send(bus: Bus, push: Push, msg_id: str, *, corrupt: bool = False, subject_learner: str | None = None) -> None:
    for header, chunk in split_chunks(push.header, push.payload):
        if corrupt:
            chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
        subject = fragment_subject(RUN, header.fragment, subject_learner or header.learner)
        await bus.publish_raw(subject, chunk, msg_id=f"{msg_id}.{header.chunk}", headers=header.to_nats())


@pytest.mark.timeout(120)
def test_other_layout_corrupt_chunk_and_replayed_push_are_refused_and_merged_once(tmp_path, material):
    s = Stack(tmp_path / "home", material["model"], material["data"])
    url = stack.up(s.home)["url"]
    try:
        shapes = {"model.layers.0.w": (64, 8), "model.layers.1.w": (64, 8)}
        a = learner("island-0", shapes)
        other_rank = learner("island-1", {**shapes, "model.layers.1.w": (64, 4)})     # e.g. another --lora-r
        other_split = learner("island-2", shapes, num_fragments=4)                 # another --fragments

        async def scenario():
            bus = await connect(url, name="admission-test")
            try:
                await bus.publish(LaunchRun(id=f"{RUN}-launch", run_id=RUN, source="test", fleet=[],
                                            recipe={"train": {"sync": SYNC}, "limits": {}}))
                await asyncio.to_thread(s.wait_for, RUN, "the run launched", bool, "RunLaunched", timeout=60)
                for i in range(3):                              # what the launcher announces for each island it starts
                    await bus.publish(IslandUp(id=f"{RUN}-up-{i}", run_id=RUN, source="test", island=i, spec=SPEC))
                for push in a.init_pushes():                    # island-0's values become version 0
                    await send(bus, push, f"a.init.{push.header.fragment}")
                await asyncio.to_thread(s.wait_for, RUN, "version 0 of both fragments, from island-0's init",
                                        lambda evs: {e["fragment"] for e in evs if e["global_version"] == 0} == {0, 1},
                                        "GlobalVersionPublished", timeout=60)
                for b in (other_rank, other_split):
                    for push in b.init_pushes():
                        await send(bus, push, f"{b.learner}.init.{push.header.fragment}")
                push = first_push(a, 0)
                await send(bus, push, "a.push.0.impostor", subject_learner="island-1")     # island-1's credential
                await send(bus, push, "a.push.0", corrupt=True)
                await send(bus, push, "a.push.0.first")
                await send(bus, push, "a.push.0.replayed")     # same bytes, another message id
            finally:
                await bus.close()

        asyncio.run(scenario())
        refused = s.wait_for(RUN, "the three refusals", lambda evs: len({(e["learner"], e["reason"]) for e in evs}) >= 5,
                             "LearnerRejected", timeout=60)
        reasons = {(e["learner"], e["reason"]) for e in refused}
        assert reasons == {("island-1", "fingerprint"), ("island-2", "fingerprint"), ("island-0", "corrupt_chunk"),
                           ("island-0", "duplicate"), ("island-1", "wrong_subject")}, refused   # the sender's, not the claim's
        layout = next(e for e in refused if e["learner"] == "island-1")
        assert "layout fingerprint" in layout["detail"] and "differs from the run's" in layout["detail"]
        # The replay's refusal came after the first push was taken (one subject, in stream order): no other push
        # is left to merge, so the first push's round is the last one.
        merged = s.wait_for(RUN, "the first push's round merged", bool, "RoundMerged", timeout=60)
        assert [(e["fragment"], e["global_version"], e["responders"]) for e in merged] == [(0, 1, ["island-0"])], merged
        joined = s.events(RUN, "LearnerJoined")
        assert {e["learner"] for e in joined} == {"island-0"}, "a refused layout must not join the run"
        print(f"refused: {sorted(reasons)}")
    finally:
        stack.down(s.home)
    assert {r["reason"] for r in s.sql(f"select reason from rejections where run_id = '{RUN}'")} == \
        {"fingerprint", "corrupt_chunk", "duplicate", "wrong_subject"}
