"""Keyframes on demand: learners receive keyframe headers only, adopt a version 0 equal to their own values
by checksum, download a keyframe only to join or when stuck behind one, and only island 0 sends the f32
initial values. Unit tests over DilocoSync with a fake clock; then the real NatsTransport on a real
nats-server (headers-only delivery, direct get by sequence, several chunks)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from yeto.learners.bus_client import NatsTransport
from yeto.learners.diloco_sync import DilocoSync
from yeto.learners.sync_hook import DilocoHook
from yeto.learners.transport.protocol import LocalTransport
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import delta_subject, keyframe_subject
from yeto.services.syncer.broadcast import BroadcastShadow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from test_training_simulation import SHAPES, DictArrays

CONFIG = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.0)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def values(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}


def learner(seed: int, clock: Clock | None = None, name: str = "l0") -> DilocoSync:
    return DilocoSync(DictArrays(values(seed)), CONFIG, run_id="r", learner=name, clock=clock or Clock())


def keyframes_of(sync: DilocoSync, shadow: BroadcastShadow, version: int, thetas: dict[int, np.ndarray]):
    """What the syncer publishes for `version` of every fragment: (header, payload) pairs, keyframes included."""
    out = []
    for p in sync.active:
        out += shadow.publish(p, version, thetas[p], sync.layout.roles[p])
    return out


def test_version_zero_equal_to_own_values_is_adopted_without_its_payload():
    a, b = learner(0), learner(0, name="l1")                    # same seed: same initial values
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=16, codec_down="q4")
    before = {k: v.copy() for k, v in b.arrays.values.items()}
    for h, payload in keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active}):
        for hc, _ in split_chunks(h, payload, 256):
            b.offer(hc, None)                                   # announced: headers only
    assert b.missing() == []
    assert b.apply_globals() is False, "adopted: its own values, nothing changed"
    assert all(v == 0 for v in b.versions.values())
    assert b.keyframes.num_adopted == len(b.active)
    assert b.keyframes_wanted() == []
    for k, v in before.items():
        np.testing.assert_array_equal(b.arrays.values[k], v)


def test_a_learner_with_other_values_fetches_version_zero_and_ends_bit_identical():
    a, b = learner(0), learner(1, name="l1")
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=16, codec_down="q4")
    published = keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active})
    for h, payload in published:
        for hc, _ in split_chunks(h, payload, 256):
            b.offer(hc, None)
    assert b.apply_globals() is False and b.keyframes.num_adopted == 0
    wanted = b.keyframes_wanted()
    assert sorted(h.fragment for h in wanted) == sorted(b.active)
    assert b.keyframes_wanted() == [], "each keyframe is asked for once"
    for h, payload in published:                                # the transport delivers what was fetched
        for hc, chunk in split_chunks(h, payload, 256):
            b.offer(hc, chunk)
    assert b.apply_globals() is True
    for p in b.active:
        np.testing.assert_array_equal(b.anchors[p], a.anchors[p])


def test_a_learner_following_deltas_never_fetches_periodic_keyframes_but_does_when_stuck():
    clock = Clock()
    a, b = learner(0), learner(0, clock, name="l1")
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=2, codec_down="q4")
    rng = np.random.default_rng(5)
    thetas = {p: a.anchors[p].copy() for p in a.active}
    held_back = []
    for version in range(0, 5):
        if version:
            thetas = {p: t + 0.01 * rng.standard_normal(t.size).astype(np.float32) for p, t in thetas.items()}
        for h, payload in keyframes_of(a, shadow, version, thetas):
            for hc, chunk in split_chunks(h, payload, 256):
                if h.kind == "keyframe":
                    b.offer(hc, None)
                elif version == 4 and h.fragment == b.active[0]:
                    held_back.append((hc, chunk))                # this delta is lost on the way
                else:
                    b.offer(hc, chunk)
        b.apply_globals()
        clock.t += 10.0 if version == 4 else 0.1
        if version < 4:
            assert b.keyframes_wanted() == [], f"version {version}: deltas suffice"
    first, second = b.active
    assert b.versions[second] == 4 and b.versions[first] == 3
    wanted = b.keyframes_wanted()
    assert [(h.fragment, h.version) for h in wanted] == [(first, 4)], "stuck behind keyframe 4 for 10 s"
    header, payload = shadow.keyframe(first, a.layout.roles[first])      # what the fetch brings back
    assert header.version == 4
    for hc, chunk in split_chunks(header, payload, 256):
        b.offer(hc, chunk)
    assert b.apply_globals() is True and b.versions[first] == 4
    np.testing.assert_array_equal(b.anchors[first], shadow.shadows[first])
    assert first not in b.keyframes.announced


def test_a_keyframe_whose_fetch_gave_up_is_asked_for_again_after_retry_s():
    """A fetch that gave up (the server away through all its tries) must not leave the learner stuck for good:
    nothing else would ever ask for that keyframe again."""
    clock = Clock()
    a, b = learner(0), learner(1, clock, name="l1")
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=16, codec_down="q4")
    for h, _ in keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active}):
        b.offer(h, None)
    first = [(h.fragment, h.version) for h in b.keyframes_wanted()]
    assert sorted(first) == sorted((p, 0) for p in b.active)
    clock.t += b.keyframes.retry_s - 1
    assert b.keyframes_wanted() == [], "not again before retry_s"
    clock.t += 1
    assert sorted((h.fragment, h.version) for h in b.keyframes_wanted()) == sorted(first), "asked again: nothing landed"
    assert b.keyframes.num_requested == 2 * len(b.active)


class Recorder(LocalTransport):
    """A transport that records pushes and hands out scripted globals."""

    def __init__(self) -> None:
        self.pushes, self.inbox, self.fetched = [], [], []

    def send_push(self, header, payload):
        self.pushes.append(header)

    def poll_globals(self):
        out, self.inbox = self.inbox, []
        return out

    def fetch(self, header):
        self.fetched.append((header.fragment, header.version))


def test_only_the_island_that_sends_init_offers_initial_values_others_adopt():
    clock = Clock()
    a = learner(0)
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=16, codec_down="q4")
    announced = [(h, None) for h, _ in keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active})]
    first = DilocoHook(a, t0 := Recorder(), join_wait_s=1.0, sends_init=True, clock=clock, sleep=lambda s: None)
    t0.inbox = list(announced)
    first.join()
    assert {h.kind for h in t0.pushes} == {"init"} and len(t0.pushes) == len(a.active)

    b = learner(0, clock, name="l1")
    other = DilocoHook(b, t1 := Recorder(), join_wait_s=1.0, sends_init=False, clock=clock, sleep=lambda s: None)
    t1.inbox = list(announced)
    other.join()
    assert t1.pushes == [] and t1.fetched == [] and all(v == 0 for v in b.versions.values())
    assert other.stats() == dict(adopted=len(b.active), keyframes_requested=0, dropped_chunks=0, bytes_sent=0,
                                 bytes_fetched=0)


class Finalized(Recorder):
    """A transport whose run is marked final at `versions`; records the acknowledgements."""

    def __init__(self, versions: dict[int, int]) -> None:
        super().__init__()
        self.final, self.acks = versions, []

    def final_versions(self):
        return self.final

    def ack_final(self, versions):
        self.acks.append(versions)


def test_the_final_versions_are_acknowledged_once_and_only_once_held():
    a = learner(0)
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=16, codec_down="q4")
    t = Finalized({p: 1 for p in a.active})
    for h, payload in keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active}):
        t.inbox += split_chunks(h, payload, 256)                  # version 0 only
    a.step_boundary(1, 100, t)
    assert t.acks == [], "final is version 1; this learner holds 0"
    for h, payload in keyframes_of(a, shadow, 1, {p: a.anchors[p] + 1 for p in a.active}):
        t.inbox += split_chunks(h, payload, 256)
    a.step_boundary(2, 100, t)
    a.step_boundary(3, 100, t)
    assert t.acks == [{p: 1 for p in a.active}]


def test_without_version_zero_a_non_init_island_offers_its_own_after_the_wait():
    clock = Clock()

    def sleep(s):
        clock.t += s

    b = learner(0, clock, name="l1")
    hook = DilocoHook(b, t := Recorder(), join_wait_s=1.0, sends_init=False, clock=clock, sleep=sleep)
    hook.join()
    assert {h.kind for h in t.pushes} == {"init"} and len(t.pushes) == len(b.active)
    assert clock.t >= 2.0, "waited for version 0, offered its own, waited again"


def until(t, done, timeout_s: float = 20.0) -> None:
    """Check `done()` each time globals arrive at the transport's inbox (no polling), up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done() and t.inbox.wait(deadline - time.monotonic()):
        pass


def test_nats_transport_gets_keyframe_headers_only_and_fetches_payload_on_demand(nats_server, run_id):
    import asyncio

    from yeto.infra.bus import connect

    a = learner(3)
    shadow = BroadcastShadow(run_id=run_id, fingerprint=a.fingerprint, keyframe_every=16, codec_down="q4")
    published = keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active})
    theta1 = {p: a.anchors[p] + 0.5 for p in a.active}
    published += keyframes_of(a, shadow, 1, theta1)              # deltas of version 1 (not keyframes)

    async def publish():
        bus = await connect(nats_server.url, name="test-syncer")
        for h, payload in published:
            for hc, chunk in split_chunks(h, payload, 300):     # several chunks per keyframe
                subject = (keyframe_subject if hc.kind == "keyframe" else delta_subject)(run_id, hc.fragment, hc.chunk)
                await bus.publish_raw(subject, chunk, headers=hc.to_nats())
        await bus.close()
    asyncio.run(publish())

    t = NatsTransport(nats_server.url, run_id=run_id, learner="l0", generation=0)
    try:
        b = DilocoSync(DictArrays(values(4)), CONFIG, run_id=run_id, learner="l0")     # other values: must fetch
        assert b.fingerprint == a.fingerprint
        got: list = []
        until(t, lambda: got.extend(t.poll_globals()) or
              {h.fragment for h, c in got if h.kind == "keyframe" and h.chunk == 0} == set(a.active))
        keys = [(h, c) for h, c in got if h.kind == "keyframe"]
        assert keys and all(c is None for _, c in keys), "keyframes arrive as headers only"
        assert t.bytes_fetched == 0
        for h, c in got:
            b.offer(h, c)
        b.apply_globals()
        wanted = b.keyframes_wanted()
        assert sorted(h.fragment for h in wanted) == sorted(a.active)
        for h in wanted:
            t.fetch(h)

        def caught_up() -> bool:
            b.receive(t)
            b.apply_globals()
            return all(v == 1 for v in b.versions.values())
        until(t, caught_up)
        assert all(v == 1 for v in b.versions.values()), b.versions
        assert t.bytes_fetched == sum(len(p) for h, p in published if h.kind == "keyframe")
        for p in a.active:
            np.testing.assert_array_equal(b.anchors[p], shadow.shadows[p])
    finally:
        t.close(flush_s=1)


def test_a_joining_learner_takes_its_first_keyframe_outright_instead_of_blending_its_base_model_in():
    blend = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.5)
    a = DilocoSync(DictArrays(values(0)), blend, run_id="r", learner="l0", clock=Clock())
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=1, codec_down="q4")
    trained = {p: a.anchors[p] + 1.0 for p in a.active}          # the run has moved away from the base model
    keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active})
    published = [m for m in keyframes_of(a, shadow, 1, trained) if m[0].kind == "keyframe"]
    late = DilocoSync(DictArrays(values(0)), blend, run_id="r", learner="l1", clock=Clock())   # a replacement
    for h, payload in published:
        for hc, chunk in split_chunks(h, payload, 256):
            late.offer(hc, chunk)
    assert late.apply_globals() is True
    for p in late.active:
        offset = 0
        for t in late.layout.fragments[p]:
            np.testing.assert_array_equal(late.arrays.values[t.name].ravel(), shadow.shadows[p][offset:offset + t.numel])
            offset += t.numel


def test_adopting_version_zero_keeps_the_steps_trained_and_pushed_before_it():
    """Version 0 adopted by checksum is the learner's own initial values: a learner that trained (and pushed against
    those values) while it was on its way keeps all of it, and its unanswered push stays unanswered. It used to blend
    version 0 in (half the progress gone) and drop the push, so its next push carried the loss back to the run."""
    blend = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.5, codec_up="f32")
    a = DilocoSync(DictArrays(values(0)), blend, run_id="r", learner="l0", clock=Clock())
    shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=16, codec_down="q4")
    announced = keyframes_of(a, shadow, 0, {p: a.anchors[p] for p in a.active})
    b = DilocoSync(DictArrays(values(0)), blend, run_id="r", learner="l1", clock=Clock())
    pushes = []
    for step in (1, 2):                                          # trained while version 0 was on its way
        for k in b.arrays.values:
            b.arrays.values[k] = b.arrays.values[k] + 1.0
        pushes += b.after_step(step, 10)
    assert [m.header.fragment for m in pushes] == [1] and 1 in b.unanswered
    for h, _ in announced:
        b.offer(h, None)
    assert b.apply_globals() is False and all(v == 0 for v in b.versions.values())
    for k, v in b.arrays.values.items():
        np.testing.assert_allclose(v, values(0)[k] + 2.0, rtol=1e-6)
    assert 1 in b.unanswered and b.in_flight == {1: 1}, "no global answered the push"
    for k in b.arrays.values:
        b.arrays.values[k] = b.arrays.values[k] + 0.5
    pushes = [m for step in range(3, 7) for m in b.after_step(step, 10) if m.header.fragment == 1]
    assert [m.header.local_step for m in pushes] == [6]
    np.testing.assert_allclose(np.frombuffer(pushes[0].payload, np.float32), 0.5, rtol=1e-6)   # only what came after


def test_rebase_keeps_the_steps_trained_while_a_push_was_in_flight_and_blend_does_not():
    """global_apply = rebase: theta <- theta + (1 - alpha)(global - r), r = the values at the push (the anchor for a
    fragment with no push pending); blend overwrites them (alpha 0). Every tensor moves +2 before the push, +0.5
    while it is in flight, and version 1 is the anchor + 3 for both fragments (f32: exact)."""
    out = {}
    for mode in ("blend", "rebase"):
        cfg = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.0, global_apply=mode, codec_down="f32")
        a = DilocoSync(DictArrays(values(0)), cfg, run_id="r", learner="l0", clock=Clock())
        shadow = BroadcastShadow(run_id="r", fingerprint=a.fingerprint, keyframe_every=1, codec_down="f32")
        for h, _ in keyframes_of(a, shadow, 0, {p: a.anchors[p].copy() for p in a.active}):
            a.offer(h, None)
        a.apply_globals()                                        # version 0 adopted by checksum
        base = {p: a.anchors[p].copy() for p in a.active}
        pushes = []
        for step in (1, 2):
            for k in a.arrays.values:
                a.arrays.values[k] = a.arrays.values[k] + 1.0
            pushes += a.after_step(step, 10)
        assert [m.header.fragment for m in pushes] == [1], "fragment 1 is pushed at step 2 (offset H/P)"
        for k in a.arrays.values:                                # trained while the push is in flight
            a.arrays.values[k] = a.arrays.values[k] + 0.5
        for h, payload in keyframes_of(a, shadow, 1, {p: base[p] + 3.0 for p in a.active}):
            for hc, chunk in split_chunks(h, payload, 256):
                a.offer(hc, chunk)
        assert a.apply_globals() is True and a.at_push == {}
        out[mode] = {p: a._flat(p) - base[p] for p in a.active}
        assert a.c_steps == {0: 2, 1: 0}, "the counts the push carried went into the global; fragment 0 never pushed"
    np.testing.assert_allclose(out["blend"][0], 3.0, rtol=1e-6)
    np.testing.assert_allclose(out["blend"][1], 3.0, rtol=1e-6)
    np.testing.assert_allclose(out["rebase"][1], 3.0 + 0.5, rtol=1e-6)      # the global, plus the in-flight steps
    np.testing.assert_allclose(out["rebase"][0], 3.0 + 2.5, rtol=1e-6)      # no push: the global's move from its anchor
