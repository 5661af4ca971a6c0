"""Admission: every rejection reason is reachable through the real SyncerCore; quorum and the grace formula."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import LearnerRejected, RoundMerged
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.grace import grace_s, quorum_size
from yeto.services.syncer.outputs import Broadcast
from yeto.services.syncer.rounds import WakeAt

N, FP = 600, "a" * 64


def msg(kind="push", codec="q4", values=None, **fields):
    values = np.full(N, 0.01, np.float32) if values is None else values
    payload = codecs.codec(codec).encode(values)
    h = dict(run_id="r", learner="l0", fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=N, c_tokens=10, c_steps=1,
             local_step=1)
    h.update(fields)
    return split_chunks(FragmentHeader(**h), payload, chunk_bytes=200)


def send(core, chunks, now=0.0):
    out = []
    for h, c in chunks:
        out += core.receive(h, c, now)
    return out


def reasons(out):
    return [o.reason for o in out if isinstance(o, LearnerRejected)]


@pytest.fixture
def core():
    c = SyncerCore(SyncConfig(quorum=3, max_base_lag=1), run_id="r", fragments=[0])
    send(c, msg("init", "f32", np.zeros(N, np.float32)))
    c.fragments[0].round.version = 3
    return c


def test_each_rejection_reason_is_reachable(core):
    cases = [
        (msg(fingerprint="b" * 64), "fingerprint"),
        (msg(numel=N + 1), "bad_header"),
        (msg(fragment=1), "not_owned"),
        (msg(base_version=1), "stale_base"),
        (msg(base_version=4), "future_base"),
        (msg(values=np.full(N, np.nan, np.float32), codec="f32", base_version=3), "non_finite"),
        (msg("init", "f32", np.ones(N, np.float32), learner="l9"), "init_mismatch"),
    ]
    for chunks, reason in cases:
        assert reasons(send(core, chunks)) == [reason], reason
    h, c = msg(base_version=3)[0]
    assert reasons(core.receive(h, c[:-1], 0.0)) == ["corrupt_chunk"]
    assert reasons(core.receive(h.model_copy(update={"numel": 1 << 40}), c, 0.0)) == ["bad_header"], "checked against the layout"
    fresh, (init, chunk) = SyncerCore(SyncConfig(), run_id="r"), msg("init", "f32")[0]     # no version 0 yet: only a cap
    assert reasons(fresh.receive(init.model_copy(update={"numel": 1 << 40}), chunk, 0.0)) == ["too_large"]
    assert reasons(send(core, msg(base_version=3, generation=2, local_step=5))) == []
    assert reasons(send(core, msg(base_version=3, generation=2, local_step=5))) == ["duplicate"]
    assert reasons(send(core, msg(base_version=3, generation=1, local_step=9))) == ["replaced_generation"]


def test_quorum_then_grace_deadline_then_merge(core):
    core.config = SyncConfig(quorum=2, grace_max_s=5.0)
    send(core, msg("init", "f32", np.zeros(N, np.float32), learner="l1"))           # three live learners
    send(core, msg(learner="l2", base_version=3, step_time_s=1.0), now=0.0)
    out = send(core, msg(learner="l0", base_version=3, step_time_s=1.0), now=0.5)
    wake = [o for o in out if isinstance(o, WakeAt)]
    assert wake == [WakeAt(0, 0.5 + 0.8 * (2 * 1.0 - 0.5 - 0.0))]             # grace = gamma (tau xi_step - xi_quorum - xi_sync)
    assert [o for o in core.tick(1.6) if isinstance(o, RoundMerged)] == []
    merged = [o for o in core.tick(wake[0].at) if isinstance(o, RoundMerged)]
    assert len(merged) == 1 and merged[0].responders == ["l2", "l0"] and merged[0].global_version == 4
    assert merged[0].quorum_ms == pytest.approx(500) and merged[0].grace_ms == pytest.approx(1200)
    out = send(core, msg(learner="l2", base_version=4, local_step=2), now=2.0)
    out += send(core, msg(learner="l1", base_version=4, local_step=2), now=2.0)
    out += send(core, msg(learner="l0", base_version=4, local_step=2), now=2.0)  # every live learner in: no waiting
    assert [o.responders for o in out if isinstance(o, RoundMerged)] == [["l2", "l1", "l0"]]


def test_quorum_and_grace_formulas():
    assert [quorum_size(n, None) for n in range(5)] == [1, 1, 2, 2, 3]
    assert quorum_size(5, 1) == 1 and quorum_size(2, 4) == 2
    kw = dict(gamma=0.8, tau_steps=2.0, grace_max_s=1.0)
    assert grace_s(slowest_step_s=0.5, quorum_s=0.1, sync_s=0.1, **kw) == pytest.approx(0.8 * 0.8)
    assert grace_s(slowest_step_s=10.0, quorum_s=0.0, sync_s=0.0, **kw) == 1.0
    assert grace_s(slowest_step_s=0.1, quorum_s=1.0, sync_s=0.0, **kw) == 0.0



def test_overlapping_pushes_are_credited_their_tokens_once():
    from yeto.schemas.fragments import FragmentHeader
    from yeto.services.syncer.ledger import LearnerRecord

    def push(c_tokens, tokens_to, fragment=0, generation=0):
        return FragmentHeader(run_id="r", learner="a", generation=generation, fragment=fragment, numel=1,
                              c_tokens=c_tokens, tokens_to=tokens_to)

    rec = LearnerRecord(generation=0)
    assert rec.credit(push(100, 100)) == 100
    assert rec.credit(push(200, 200)) == 100, "pushed again before the first merge came back: 100 tokens are old"
    assert rec.credit(push(50, 250)) == 50, "after the global landed the learner counts from its last push"
    assert rec.credit(push(300, 300, fragment=1)) == 300, "fragments are credited apart"
    assert rec.credit(push(80, 80, generation=1)) == 80, "another generation: its own counts"
    assert rec.credit(push(40, 0)) == 40, "a learner that sends no tokens_to is credited c_tokens"


def keyframes(out):
    return [(o.header.fragment, o.header.version) for o in out if isinstance(o, Broadcast) and o.header.kind == "keyframe"]


def test_a_stale_push_brings_a_keyframe_of_the_current_version_once(core):
    """Learners whose pushes are all stale have missed a delta: nothing else makes a new keyframe (no new
    version merges while every push is refused), so the refusal does, unless one newer than their base is out."""
    core.fragments[0].shadow.version = 3
    out = send(core, msg(base_version=1))
    assert reasons(out) == ["stale_base"] and keyframes(out) == [(0, 3)]
    out = send(core, msg(base_version=1, learner="l1"))
    assert reasons(out) == ["stale_base"] and keyframes(out) == [], "keyframe 3 is newer than their base: fetch that"
    assert keyframes(send(core, msg(base_version=3, local_step=2))) == [], "an admitted push brings none"
