"""A learner credential attacks the syncer's push path (issue #12) and is refused with a typed event: another
learner's identity, an unannounced generation, c_tokens=1e15, a huge push norm, 256 MiB announced in a 4 MiB
chunk, partial messages that pile up, pushes for a run that never launched. Genuine pushes still merge."""
from __future__ import annotations

import tracemalloc
from functools import reduce

import numpy as np
import pytest

from yeto.infra.bus import connect
from yeto.schemas import codecs
from yeto.schemas.base import parse
from yeto.schemas.fleet import IslandReplaced, IslandUp, RunLaunched
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import CHUNK_BYTES, event_subject, fragment_subject
from yeto.schemas.training import LearnerRejected, RoundMerged
from yeto.services.syncer import runs
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.dataplane import DataPlane
from yeto.services.syncer.refusals import UNKNOWN_RUN_NAKS
from yeto.services.syncer.roster import Roster

pytestmark = pytest.mark.own_nats_server          # the data-plane test below takes every fragment message of its server
RUN, N, FP = "r-sec", 4096, "e" * 64
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": "", "spot": False}
TRAIN = {"micro_batch": 2, "grad_accum": 1, "seq_len": 64, "sync": {"quorum": 2, "grace_max_s": 0.0, "inner_steps": 4}}


def tape(*extra) -> runs.SyncerState:
    events = [RunLaunched(run_id=RUN, fleet=[SPEC, SPEC], recipe={"train": TRAIN}),
              IslandUp(run_id=RUN, island=0, spec=SPEC), IslandUp(run_id=RUN, island=1, spec=SPEC), *extra]
    return reduce(runs.evolve, events, runs.SyncerState())


def core_from(state: runs.SyncerState) -> SyncerCore:
    info = state.runs[RUN]
    core = SyncerCore(SyncConfig.from_dict(info.sync), run_id=RUN)
    core.roster = Roster(info.generations, info.ranks, info.tokens_per_step)
    return core


def msg(learner: str, kind: str = "push", values=None, codec: str = "q4", **fields) -> list[tuple[FragmentHeader, bytes]]:
    values = np.full(N, 0.01, np.float32) if values is None else values
    payload = codecs.codec(codec).encode(values)
    fields = {"local_step": 4, "c_steps": 4, "c_tokens": 400, **fields}
    h = FragmentHeader(run_id=RUN, learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=values.size,
                       sha256=sha256(payload), **fields)
    return split_chunks(h, payload, chunk_bytes=1024)


def send(core: SyncerCore, chunks, *, sender: str | None = None, now: float = 0.0) -> list:
    out = []
    for h, c in chunks:
        out += core.receive(h, c, now, sender=h.learner if sender is None else sender)
    return out


def refusals(out) -> list[tuple[str, str]]:
    return [(o.learner, o.reason) for o in out if isinstance(o, LearnerRejected)]


def merged(out) -> list[RoundMerged]:
    return [o for o in out if isinstance(o, RoundMerged)]


@pytest.fixture
def core() -> SyncerCore:
    c = core_from(tape())
    for learner in ("island-0", "island-1"):                     # both live: a round waits for both
        assert refusals(send(c, msg(learner, "init", np.ones(N, np.float32), codec="f32"))) == []
    return c


def test_a_forged_generation_is_refused_before_the_ledger_and_the_genuine_one_still_merges(core):
    out = send(core, msg("island-1", generation=999))
    assert refusals(out) == [("island-1", "not_announced")] and "generation 999" in out[0].detail
    assert core.refused and core.learners["island-1"].generation == 0, "a refused push leaves no trace in the ledger"
    out = send(core, msg("island-0")) + send(core, msg("island-1"))
    assert refusals(out) == [] and [m.responders for m in merged(out)] == [["island-0", "island-1"]]
    stranger = send(core, msg("island-7", local_step=8))
    assert refusals(stranger) == [("island-7", "not_announced")] and "no IslandUp" in stranger[0].detail


def test_a_replacement_is_admitted_once_announced_and_then_supersedes_its_predecessor():
    c = core_from(tape())
    send(c, msg("island-0", "init", np.ones(N, np.float32), codec="f32"))
    assert refusals(send(c, msg("island-1", generation=1))) == [("island-1", "not_announced")]
    c = core_from(tape(IslandReplaced(run_id=RUN, island=1, generation=1, spec=SPEC, previous_generation=0)))
    send(c, msg("island-0", "init", np.ones(N, np.float32), codec="f32"))
    assert refusals(send(c, msg("island-1", generation=1))) == []
    assert refusals(send(c, msg("island-1", generation=0, local_step=9))) == [("island-1", "replaced_generation")]


def test_c_tokens_of_1e15_is_refused_and_weights_stay_bounded(core):
    out = send(core, msg("island-1", c_tokens=10**15))
    assert refusals(out) == [("island-1", "too_many_tokens")] and "exceeds" in out[0].detail
    slots = 2 * 64                                  # token slots per step: micro_batch x grad_accum x seq_len, one rank
    claim = send(core, msg("island-1", c_steps=10**6, c_tokens=2 * slots * 10**6))   # consistent, but a million steps
    (m,) = merged(claim + send(core, msg("island-0", c_tokens=400)))
    cap = 2 * slots * 4 * 2                         # headroom x slots x H x (lag 0 + 2): what the recipe allows
    assert m.weights == pytest.approx([cap / (cap + 400), 400 / (cap + 400)]) and m.tokens == cap + 400
    assert max(m.weights) < 0.85, "the most an island can claim is the recipe's rate, with headroom, since its base"


def test_a_push_far_larger_than_the_fragment_is_refused(core):
    out = send(core, msg("island-1", values=np.full(N, 50.0, np.float32)))
    assert refusals(out) == [("island-1", "norm_too_large")] and "max_push_norm_ratio" in out[0].detail
    assert refusals(send(core, msg("island-1", values=np.full(N, 0.5, np.float32), local_step=8))) == []


def test_a_header_claiming_another_learner_is_refused_and_recorded_against_the_sender(core):
    out = send(core, msg("island-0"), sender="island-1")
    assert refusals(out) == [("island-1", "wrong_subject")] and "yeto.frag.<run>.<fragment>.<its own id>" in out[0].detail
    assert core.refused and not core.fragments[0].round.pending


def test_256_mib_announced_in_a_4_mib_chunk_allocates_nothing_of_it(core):
    huge = 256 << 20
    payload = np.random.default_rng(0).bytes(CHUNK_BYTES)
    h = FragmentHeader(run_id=RUN, learner="island-1", fragment=0, kind="push", fingerprint=FP, codec="f32", numel=huge // 4,
                       sha256="0" * 64, num_chunks=huge // CHUNK_BYTES, chunk_sha256=sha256(payload))
    fresh = core_from(tape())                                   # no version 0 yet: the size is not known
    tracemalloc.start()
    try:
        assert refusals(core.receive(h, payload, 0.0, sender="island-1")) == [("island-1", "bad_header")]
        for i in range(64):                                      # 64 partials, one chunk each, from an announced learner
            forged = h.model_copy(update={"kind": "init", "local_step": i})
            fresh.receive(forged, payload, 0.0, sender="island-1")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak >> 20} MiB"      # the chunk is the test's own object: nothing of 64 x 256 MiB
    assert fresh.assembler.pending_bytes == 64 * CHUNK_BYTES == sum(
        len(c) for _, chunks in fresh.assembler.pending.values() for c in chunks.values())


def test_partial_messages_are_capped_and_evicted_oldest_first_with_a_rejection(core):
    sized = core.assembler
    out = []
    for step in range(1, 5):                                  # a learner that never finishes its messages
        out += send(core, msg("island-1", local_step=step, values=np.full(N, 0.01 * step, np.float32))[:2])
    assert sized.max_sender_bytes == 2 * 4 * N and sized.pending_bytes <= sized.max_sender_bytes
    assert len(sized.pending) == 4, "two chunks of 1 KiB each fit in 32 KiB"
    small = SyncerCore(SyncConfig(), run_id=RUN, roster=core.roster)
    send(small, msg("island-0", "init", np.ones(N, np.float32), codec="f32"))
    small.config = SyncConfig(max_pending_bytes=3000)
    out = []
    for step in range(1, 4):
        out += send(small, msg("island-1", local_step=step)[:2])
    assert refusals(out) == [("island-1", "evicted"), ("island-1", "evicted")] and small.assembler.pending_bytes <= 3000
    assert [h.local_step for h, _ in small.assembler.pending.values()] == [3], "the oldest went first"


class FakeDelivery:
    """A Delivery that records what the data plane did with it."""

    def __init__(self, subject: str, seq: int = 7) -> None:
        self.subject, self.data, self.headers, self.seq, self.num_pending = subject, b"", {}, seq, 0
        self.done: list[str] = []

    async def ack(self): self.done.append("ack")
    async def nak(self, delay_s=None): self.done.append("nak")
    async def term(self): self.done.append("term")
    async def in_progress(self): pass


class Published(list):
    async def publish(self, event, **kw):
        self.append(event)


async def test_a_push_for_a_run_that_never_launched_is_naked_a_bounded_number_of_times_then_terminated(tmp_path):
    plane, bus, msg_ = DataPlane(state_dir=tmp_path), Published(), FakeDelivery(fragment_subject("ghost", 0, "island-0"))
    for _ in range(UNKNOWN_RUN_NAKS + 1):
        await plane.receive(bus, msg_, {})
    assert msg_.done == ["nak"] * UNKNOWN_RUN_NAKS + ["term"]
    assert [(e.run_id, e.learner, e.reason) for e in bus] == [("ghost", "island-0", "unknown_run")]
    assert not plane.refusals.naks, "its count is forgotten once it is terminated"


async def test_an_unannounced_push_waits_a_bounded_while_and_a_refused_one_is_terminated_at_once(tmp_path):
    plane, bus = DataPlane(state_dir=tmp_path), Published()
    h, chunk = msg("island-0", generation=5)[0]
    delivery = FakeDelivery(fragment_subject(RUN, 0, "island-0"))
    delivery.headers, delivery.data = h.to_nats(), chunk
    plane.perform = lambda bus, run_id, outputs: bus.publish(*outputs)   # the events only
    for _ in range(UNKNOWN_RUN_NAKS + 1):           # the launcher's announcement may lag: a while, not forever
        await plane.receive(bus, delivery, tape().runs)
    assert delivery.done == ["nak"] * UNKNOWN_RUN_NAKS + ["term"] and [e.reason for e in bus] == ["not_announced"]
    h, chunk = msg("island-0", generation=0, c_tokens=10**15)[0]
    delivery = FakeDelivery(fragment_subject(RUN, 0, "island-0"), seq=8)
    delivery.headers, delivery.data = h.to_nats(), chunk
    await plane.receive(bus, delivery, tape().runs)
    assert delivery.done == ["term"] and [e.reason for e in bus][1:] == ["bad_header"], "no version 0: refused at once"


async def test_a_later_push_waits_behind_an_earlier_one_that_waits_for_its_announcement(tmp_path):
    """Island-1's first push comes before its IslandUp (nak'ed for a retry); its second, after it. Taken at once,
    the second would make the first a duplicate when it comes back (a push carries only the progress since the
    previous one): its progress lost. The second waits behind the first, and both are taken, in order."""
    plane, bus = DataPlane(state_dir=tmp_path), Published()

    async def perform(bus, run_id, outputs) -> None:       # what the core decided, kept
        bus.extend(outputs)
    plane.perform = perform
    unannounced = reduce(runs.evolve, [RunLaunched(run_id=RUN, fleet=[SPEC, SPEC], recipe={"train": TRAIN}),
                                       IslandUp(run_id=RUN, island=0, spec=SPEC)], runs.SyncerState()).runs

    seqs = iter(range(1, 1000))

    def deliveries(learner: str, chunks) -> list[FakeDelivery]:
        out = []
        for h, chunk in chunks:
            out.append(FakeDelivery(fragment_subject(RUN, 0, learner), seq=next(seqs)))
            out[-1].headers, out[-1].data = h.to_nats(), chunk
        return out

    async def receive(ds: list[FakeDelivery], state) -> None:
        for d in ds:
            await plane.receive(bus, d, state)

    init = deliveries("island-0", msg("island-0", "init", np.ones(N, np.float32), codec="f32"))
    first, second = deliveries("island-1", msg("island-1", local_step=4)), deliveries("island-1", msg("island-1", local_step=8))
    await receive(init, unannounced)
    await receive(first, unannounced)
    assert len(first) > 1 and [d.done for d in first] == [["nak"]] * len(first)
    await receive(second, tape().runs)                      # the IslandUp came meanwhile
    assert [d.done for d in second] == [["nak"]] * len(second), "taken now, it would make the first a duplicate"
    await receive(first + second, tape().runs)              # the retries, in the order they were nak'ed
    assert all(d.done == ["nak"] for d in first + second) and not refusals(bus), list(bus)
    assert plane.cores[RUN].learners["island-1"].last_step[0] == 8


@pytest.mark.timeout(60)
async def test_attacks_through_the_real_data_plane_are_refused_with_events(nats_server, tmp_path):
    """Over a real nats-server: an impostor's subject, c_tokens=1e15 and a 256 MiB announcement each end in a
    LearnerRejected on the tape's stream, while the genuine init becomes version 0."""
    bus, plane = await connect(nats_server.url, name="attacker-test"), DataPlane(state_dir=tmp_path)
    try:
        runs_now = tape().runs
        big = np.random.default_rng(1).bytes(CHUNK_BYTES)
        huge = FragmentHeader(run_id=RUN, learner="island-1", fragment=0, fingerprint=FP, codec="f32", numel=(256 << 20) // 4,
                              sha256="0" * 64, num_chunks=64, chunk_sha256=sha256(big))
        sends = [(msg("island-0", "init", np.ones(N, np.float32), codec="f32"), "island-0"),
                 (msg("island-0", local_step=8), "island-1"),                   # island-1's credential, island-0's name
                 (msg("island-1", c_tokens=10**15), "island-1"), ([(huge, big)], "island-1")]
        for chunks, subject_learner in sends:
            for h, chunk in chunks:
                await bus.publish_raw(fragment_subject(RUN, 0, subject_learner), chunk, headers=h.to_nats())
        await plane.open(bus)
        events = await bus.consumer([event_subject(RUN, "LearnerRejected")], ack=False)
        seen: list = []
        while len(seen) < 3:
            await plane.take_in(bus, lambda: runs_now, timeout_s=1.0)
            seen += [parse(d.data) for d in await events.fetch(10, timeout_s=0.2)]
        assert sorted((e.learner, e.reason) for e in seen) == [("island-1", "bad_header"), ("island-1", "too_many_tokens"),
                                                               ("island-1", "wrong_subject")]   # the sender's, not the claim's
        assert plane.cores[RUN].fragments[0].version == 0 and plane.cores[RUN].assembler.pending_bytes == 0
        assert await plane.consumer.num_pending() == 0
    finally:
        await bus.close()


def rounds_of(core: SyncerCore, pushes) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """(responders of each round merged, refusals) after sending `pushes`: (learner, now, fields) each."""
    out = []
    for learner, now, fields in pushes:
        out += send(core, msg(learner, **fields), now=now)
    return [m.responders for m in merged(out)], refusals(out)


def test_refused_pushes_are_no_heartbeat_so_a_hostile_island_cannot_hold_the_quorum(core):
    """Island 1 merges once, then sends only pushes that are refused (norm 50x the bound), each second: it must go
    silent for quorum like an island that sends nothing, and island 0 merges alone after the silence bound (3 s)."""
    assert rounds_of(core, [("island-0", 0.0, {}), ("island-1", 0.0, {})])[0] == [["island-0", "island-1"]]
    junk, responders, refused = np.full(N, 50.0, np.float32), [], []
    for t in range(1, 13):                  # both push on the version they hold, as learners do
        base = core.fragments[0].version
        got = rounds_of(core, [("island-1", float(t), {"values": junk, "local_step": 4 + 4 * t, "base_version": base}),
                               ("island-0", t + 0.5, {"local_step": 4 + 4 * t, "base_version": base})])
        responders, refused = responders + got[0], refused + got[1]
    assert refused == [("island-1", "norm_too_large")] * 12
    assert responders and set(map(tuple, responders)) == {("island-0",)}, "the genuine island merges alone"
    assert core.fragments[0].version >= 8 and core.live(12.5) == {"island-0"}


def test_a_forged_push_at_step_ten_million_blocks_its_learner_only_until_the_next_version(core):
    """A push at local step 10^7 under island 1's credential is admitted (it is well formed) and merges with island
    0's; island 1's genuine pushes after it, on the next version, are not 'duplicate': duplicates are keyed on the
    syncer's own base version first. A replay of an admitted push is still a duplicate."""
    assert rounds_of(core, [("island-0", 0.0, {}), ("island-1", 0.0, {})])[0] == [["island-0", "island-1"]]
    forged = rounds_of(core, [("island-1", 1.0, {"local_step": 10**7, "base_version": 1}),
                              ("island-0", 1.0, {"local_step": 8, "base_version": 1})])
    assert forged == ([["island-1", "island-0"]], [])
    genuine = [("island-1", 2.0, {"local_step": 8, "base_version": 2}), ("island-0", 2.0, {"local_step": 12, "base_version": 2}),
               ("island-1", 3.0, {"local_step": 12, "base_version": 3}), ("island-0", 3.0, {"local_step": 16, "base_version": 3})]
    responders, refused = rounds_of(core, genuine)
    assert refused == [] and responders == [["island-1", "island-0"]] * 2, "both islands go on merging"
    replay = rounds_of(core, [("island-1", 4.0, {"local_step": 12, "base_version": 3})])
    assert replay == ([], [("island-1", "duplicate")])
