"""Liveness: a generation reported gone stops counting at once, a silent learner soon after; rounds waiting on it merge.

A learner is silent after a few of its push gaps, relative to the others' arrivals; a replacement counts from its
first chunk, a first-generation learner from the run's start (it may still be loading); a gone learner's last push
waits for a live learner's push and merges with it. Pure: every time is passed in; the last test drives the data
plane over the in-memory bus."""
from __future__ import annotations

from functools import reduce

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.fleet import IslandDropped, IslandExited, IslandPreempted, IslandReplaced, IslandStopped, IslandUp, RunLaunched
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.shape import shape_version
from yeto.schemas.training import RoundMerged
from yeto.services.syncer import liveness, runs
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.dataplane import roster_of
from yeto.services.syncer.ledger import LearnerRecord
from yeto.services.syncer.rounds import WakeAt

RUN, N, FP = "r-live", 512, "f" * 64
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": "", "spot": False}
SYNC = {"num_fragments": 2, "inner_steps": 8, "grace_max_s": 0.0}
STEP_S = 0.25                        # every push says so: silence bound 4 gaps x ceil(8/2) steps x 0.25 s = 4 s


def fold(*events) -> runs.SyncerState:
    launched = RunLaunched(run_id=RUN, fleet=[SPEC, SPEC], recipe={"train": {"sync": SYNC}})
    up = [IslandUp(run_id=RUN, island=i, spec=SPEC) for i in (0, 1)]
    return reduce(runs.evolve, [launched, *up, *events], runs.SyncerState())


def chunks(learner: str, p: int, kind: str = "push", generation: int = 0, **fields) -> list:
    values = np.full(N, 0.5 if kind == "init" else 0.01, np.float32)
    codec = "f32" if kind == "init" else "q4"
    payload = codecs.codec(codec).encode(values)
    fields = {"local_step": 4, "c_steps": 4, "c_tokens": 100, "step_time_s": STEP_S, **fields} if kind == "push" else {}
    h = FragmentHeader(run_id=RUN, learner=learner, generation=generation, fragment=p, kind=kind, fingerprint=FP,
                       codec=codec, numel=N, sha256=sha256(payload), **fields)
    return split_chunks(h, payload, chunk_bytes=4096)


def send(core: SyncerCore, messages: list, now: float) -> list:
    return [out for h, c in messages for out in core.receive(h, c, now, sender=h.learner)]


def merged(out: list) -> list[tuple[int, list[str]]]:
    return [(o.fragment, o.responders) for o in out if isinstance(o, RoundMerged)]


@pytest.fixture
def core() -> SyncerCore:
    """Two announced learners, both heard (their inits at t=0): the quorum is 2."""
    c = SyncerCore(SyncConfig.from_dict(SYNC), run_id=RUN, roster=roster_of(fold().runs[RUN]))
    for learner in ("island-0", "island-1"):
        for p in (0, 1):
            send(c, chunks(learner, p, "init"), now=0.0)
    return c


def test_the_launchers_island_ends_fold_into_gone_and_the_codec_keeps_them():
    ends = [IslandExited(run_id=RUN, island=1, spec=SPEC), IslandPreempted(run_id=RUN, island=1, spec=SPEC, reason="killed"),
            IslandReplaced(run_id=RUN, island=1, generation=1, spec=SPEC, previous_generation=0),
            IslandDropped(run_id=RUN, island=0, generation=0, spec=SPEC, reason="crashing"),
            IslandStopped(run_id=RUN, island=1, generation=0, spec=SPEC)]          # a late end of an older generation
    state = fold(*ends)
    info = state.runs[RUN]
    assert info.gone == {"island-1": 0, "island-0": 0} and info.generations == {"island-0": 0, "island-1": 1}
    assert runs.evolve(state, IslandStopped(run_id="other", island=0, spec=SPEC)) == state
    assert runs.load(runs.dump(state)) == state and runs.CODEC_VERSION == shape_version(runs.SyncerState)
    assert roster_of(info).gone == {"island-1": 0, "island-0": 0}
    alone = fold(IslandReplaced(run_id=RUN, island=0, generation=2, spec=SPEC, previous_generation=1)).runs[RUN]
    assert alone.gone == {"island-0": 1}, "a replacement up means its predecessor is over, even unannounced"


def test_silence_bound_is_a_few_push_gaps_of_the_learners_own_step_time_within_floor_and_timeout():
    config = SyncConfig(num_fragments=8, inner_steps=24, learner_timeout_s=60.0)
    assert liveness.push_gap_steps(config, 8) == 3 and liveness.push_gap_steps(config, 4) == 6   # a shard of 2 hears half
    assert liveness.silence_s(0.5, config, 8) == pytest.approx(liveness.SILENT_GAPS * 3 * 0.5)
    assert liveness.silence_s(0.01, config, 8) == liveness.FLOOR_S, "never below the floor"
    assert liveness.silence_s(10.0, config, 8) == 60.0, "learner_timeout_s is the upper bound"


def test_live_drops_a_gone_generation_at_once_and_a_silent_learner_only_while_others_are_heard():
    config, records = SyncConfig(inner_steps=8, num_fragments=2), {"a": LearnerRecord(0, last_seen=10.0, step_time_s=0.25),
                                                                   "b": LearnerRecord(0, last_seen=7.0, step_time_s=0.25)}
    kw = dict(config=config, num_owned=2)
    assert liveness.live(records, now=10.0, gone={}, **kw) == {"a", "b"}, "3 s behind the newest: within its 4 s"
    assert liveness.live(records, now=10.0, gone={"a": 0}, **kw) == {"b"}
    records["b"].last_seen = 5.5                     # 4.5 s before the newest arrival: past 4 x 4 steps x 0.25 s
    assert liveness.live(records, now=10.0, gone={}, **kw) == {"a"}
    stalled = {"a": LearnerRecord(0, last_seen=1.0, step_time_s=0.25), "b": LearnerRecord(0, last_seen=0.5, step_time_s=0.25)}
    assert liveness.live(stalled, now=30.0, gone={}, **kw) == {"a", "b"}, "a syncer that stalled finds nobody silent"
    assert liveness.live(stalled, now=100.0, gone={}, **kw) == set(), "learner_timeout_s bounds silence on the wall clock"
    replaced = {"a": LearnerRecord(1, last_seen=10.0)}
    assert liveness.live(replaced, now=10.0, gone={"a": 0}, **kw) == {"a"}, "a newer generation than the one gone counts"


def test_a_round_waiting_on_a_learner_the_launcher_reports_gone_merges_at_once(core):
    assert merged(send(core, chunks("island-0", 0), now=1.0)) == [], "quorum 2: it waits for island-1"
    out = core.follow(roster_of(fold(IslandExited(run_id=RUN, island=1, spec=SPEC)).runs[RUN]), now=1.1)
    assert merged(out) == [(0, ["island-0"])] and core.live(1.1) == {"island-0"}
    assert merged(send(core, chunks("island-0", 1), now=1.2)) == [(1, ["island-0"])], "quorum is 1 of the one live"


def test_a_silent_learner_stops_counting_and_every_round_waiting_on_it_merges(core):
    assert merged(send(core, chunks("island-0", 0), now=1.0)) == []
    assert merged(send(core, chunks("island-1", 1, local_step=4), now=1.5)) == []    # both heard, quorum 2
    out = send(core, chunks("island-0", 1), now=3.0)
    assert merged(out) == [(1, ["island-1", "island-0"])]
    out = send(core, chunks("island-0", 1, local_step=8, base_version=1), now=1.5 + 4.0 + 0.1)   # island-1 silent past 4 s
    assert core.live(5.6) == {"island-0"}
    assert merged(out) == [(1, ["island-0"]), (0, ["island-0"])], "fragment 0's round waited on island-1: decided again"


def test_a_replacement_counts_from_its_first_chunk_and_the_quorum_grows_back(core):
    gone = fold(IslandPreempted(run_id=RUN, island=1, spec=SPEC, reason="killed"),
                IslandReplaced(run_id=RUN, island=1, generation=1, spec=SPEC, previous_generation=0))
    core.follow(roster_of(gone.runs[RUN]), now=1.0)
    assert core.live(1.0) == {"island-0"}, "announced is not live: a replacement may take minutes to load"
    assert merged(send(core, chunks("island-0", 0), now=1.1)) == [(0, ["island-0"])]
    send(core, chunks("island-1", 0, "init", generation=1), now=1.2)
    assert core.live(1.2) == {"island-0", "island-1"}
    assert merged(send(core, chunks("island-0", 0, local_step=8, base_version=1), now=1.3)) == [], "quorum 2 again"
    out = send(core, chunks("island-1", 0, generation=1, local_step=8, base_version=1), now=1.4)
    assert merged(out) == [(0, ["island-0", "island-1"])]


def test_at_the_start_a_learner_still_loading_counts_for_a_bounded_while_and_the_first_rounds_wait_for_it():
    timeout = 10.0
    config = SyncConfig.from_dict({**SYNC, "learner_timeout_s": timeout})
    c = SyncerCore(config, run_id=RUN, roster=roster_of(fold().runs[RUN]))
    for p in (0, 1):
        send(c, chunks("island-0", p, "init"), now=0.0)
    assert c.live(0.5) == {"island-0", "island-1"}, "island-1 announced, not heard yet"
    assert c.joining(0.5) == {"island-0", "island-1"}, "no push from either yet"
    out = send(c, chunks("island-0", 0), now=1.0)
    assert c.joining(1.0) == {"island-1"} and merged(out) == [] and [o.at for o in out if isinstance(o, WakeAt)] == [timeout], \
        "quorum 2 while island-1 joins; decided again when its joining ends"
    send(c, chunks("island-1", 0, "init"), now=3.0)
    assert c.joining(3.0) == {"island-1"}, "heard, but no push yet: still joining (its first steps may be slow)"
    assert c.live(8.0) == {"island-0", "island-1"}, "past the 3 s silence floor after its init, still counted"
    assert merged(send(c, chunks("island-1", 0), now=8.5)) == [(0, ["island-0", "island-1"])], "the first round has both"
    assert c.joining(8.6) == set(), "a push admitted: it counts as any learner from now on"

    late = SyncerCore(config, run_id=RUN, roster=roster_of(fold().runs[RUN]))
    send(late, chunks("island-0", 1, "init"), now=0.0)
    assert merged(send(late, chunks("island-0", 1), now=1.0)) == []
    assert merged(late.tick(timeout - 0.1)) == [], "within the bound it waits"
    assert merged(late.tick(timeout + 0.1)) == [(1, ["island-0"])], "a learner that never came stops counting"
    assert late.live(timeout + 0.1) == {"island-0"}


def test_a_learner_gone_before_its_first_push_is_not_waited_on():
    c = SyncerCore(SyncConfig.from_dict(SYNC), run_id=RUN, roster=roster_of(fold().runs[RUN]))
    send(c, chunks("island-0", 0, "init"), now=0.0)
    assert merged(send(c, chunks("island-0", 0), now=1.0)) == []
    out = c.follow(roster_of(fold(IslandExited(run_id=RUN, island=1, spec=SPEC)).runs[RUN]), now=1.5)
    assert merged(out) == [(0, ["island-0"])] and c.joining(1.5) == set()


def test_a_gone_learners_last_push_waits_for_a_live_push_and_merges_with_it_not_alone(core):
    assert merged(send(core, chunks("island-1", 0, local_step=6, c_steps=6), now=1.0)) == [], "its final push"
    out = core.follow(roster_of(fold(IslandExited(run_id=RUN, island=1, spec=SPEC)).runs[RUN]), now=1.1)
    assert merged(out) == [] and core.live(1.1) == {"island-0"}, "gone, its push stays pending: no round of one"
    out = send(core, chunks("island-0", 0, local_step=8, c_steps=8), now=2.0)
    assert merged(out) == [(0, ["island-1", "island-0"])], "merged with the survivor's next push"
    assert merged(send(core, chunks("island-1", 1, local_step=6, c_steps=6), now=2.1)) == []
    everyone_gone = fold(IslandExited(run_id=RUN, island=1, spec=SPEC), IslandExited(run_id=RUN, island=0, spec=SPEC))
    assert merged(core.follow(roster_of(everyone_gone.runs[RUN]), now=2.2)) == [], "nobody live: nothing to wait with"
    assert merged(core.final_cut()) == [(1, ["island-1"])], "the final cut merges what is in"


@pytest.mark.timeout(30)
async def test_the_data_plane_acts_on_the_launchers_word_without_waiting_for_another_push(tmp_path):
    from yeto.infra.bus.memory import MemoryBus
    from yeto.schemas.base import parse
    from yeto.schemas.subjects import event_subject, fragment_subject
    from yeto.services.syncer.dataplane import DataPlane

    bus, plane = MemoryBus(), DataPlane(state_dir=tmp_path)
    state = {RUN: fold().runs[RUN]}
    for h, c in [*chunks("island-0", 0, "init"), *chunks("island-1", 0, "init"), *chunks("island-0", 0)]:
        await bus.publish_raw(fragment_subject(RUN, 0, h.learner), c, headers=h.to_nats())
    await plane.open(bus)
    await plane.take_in(bus, lambda: state, timeout_s=0)
    def rounds() -> list[list[str]]:
        events = [parse(data) for _, (_, data, _) in sorted(bus.stream(event_subject(RUN, "RoundMerged")).msgs.items())]
        return [e.responders for e in events if isinstance(e, RoundMerged)]
    await plane.tick(bus, state)
    assert rounds() == [], "quorum 2: island-0's push waits"
    state = {RUN: fold(IslandExited(run_id=RUN, island=1, spec=SPEC)).runs[RUN]}
    await plane.tick(bus, state)
    assert rounds() == [["island-0"]]
    await plane.settle()                                                 # its snapshot, written in the background
    assert not bus.stream(fragment_subject(RUN, 0)).msgs, "the round's messages are acknowledged once it is durable"
