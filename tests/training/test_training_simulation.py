"""Several DilocoSync learners, the real SyncerCore and broadcast, in one process with no NATS: a toy
quadratic converges, every round merges every learner, and learners hold bit-identical globals."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.learners.diloco_sync import DilocoSync
from yeto.learners.transport.protocol import LocalTransport
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import FragmentRestored, LearnerRejected, RoundMerged
from yeto.services.syncer import snapshot
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.outputs import perform

SHAPES = {"model.embed_tokens.weight": (10, 4), "model.layers.0.mlp.weight": (16, 8), "model.layers.1.mlp.weight": (8, 8),
          "model.layers.2.attn.weight": (12, 4), "model.norm.weight": (8,)}


class DictArrays:
    """The array adapter over a dict of NumPy arrays (what the torch adapter does for a module)."""

    def __init__(self, values: dict[str, np.ndarray]) -> None:
        self.values = {k: v.astype(np.float32).copy() for k, v in values.items()}

    def names(self):
        return sorted(self.values)

    def shape(self, name):
        return self.values[name].shape

    def dtype(self, name):
        return "float32"

    def read(self, name):
        return self.values[name]

    def write(self, name, value):
        self.values[name] = np.array(value, dtype=np.float32)


class Wire:
    """In-memory wire and outputs.Sink: pushes go to the syncer core, its broadcasts to every learner's inbox."""

    def __init__(self, core: SyncerCore, tmp_path, chunk_bytes: int = 700) -> None:
        self.core, self.tmp_path, self.chunk_bytes = core, tmp_path, chunk_bytes
        self.inboxes: dict[str, list] = {}
        self.events: list = []
        self.now = 0.0
        self.wire_up = self.wire_down = 0

    def transport(self, learner: str):
        bus = self
        inbox = self.inboxes.setdefault(learner, [])

        class T(LocalTransport):
            def send_push(self, header, payload):
                bus.wire_up += len(payload)
                for h, chunk in split_chunks(header, payload, bus.chunk_bytes):
                    bus.handle(bus.core.receive(h, chunk, bus.now))

            def poll_globals(self):
                out = list(inbox)
                inbox.clear()
                return out
        return T()

    def handle(self, outputs) -> None:
        perform(outputs, self)

    def chunk(self, h, chunk) -> None:          # one chunk of a broadcast, to every learner
        for inbox in self.inboxes.values():
            inbox.append((h, chunk))
        self.wire_down += len(chunk) if h.kind == "delta" else 0

    def snapshot(self, snap) -> None:
        snapshot.write(self.tmp_path, snap)

    snapshot_later = snapshot

    def event(self, event) -> None:
        self.events.append(event)

    def wake(self, at) -> None:                 # the test ticks the core every step
        pass

def run(tmp_path, *, num_learners=3, steps=240, config=None, seed=0):
    rng = np.random.default_rng(seed)
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    targets = [{k: rng.standard_normal(s).astype(np.float32) + 2.0 for k, s in SHAPES.items()} for _ in range(num_learners)]
    config = config or SyncConfig(num_fragments=4, inner_steps=8, alpha=0.5)
    # Simulated time throughout: a merge takes none (the wall clock's merge seconds shrink the next round's grace, and a
    # fresh process's first merges compile kernels for seconds), and a keyframe's patience runs out in simulated seconds.
    core = SyncerCore(config, run_id="r-sim", clock=lambda: bus.now)
    bus = Wire(core, tmp_path)
    learners = [DilocoSync(DictArrays(init), config, run_id="r-sim", learner=f"l{m}", clock=lambda: bus.now)
                for m in range(num_learners)]
    transports = [bus.transport(f"l{m}") for m in range(num_learners)]
    for sync, t in zip(learners, transports):
        for push in sync.init_pushes():
            t.send_push(push.header, push.payload)
    for step in range(1, steps + 1):
        bus.now = step * 0.05
        for m, (sync, t) in enumerate(zip(learners, transports)):
            for name, value in sync.arrays.values.items():       # one SGD step on 0.5 * |x - target_m|^2
                value -= 0.05 * (value - targets[m][name] + 0.1 * rng.standard_normal(value.shape).astype(np.float32))
            sync.step_boundary(step, 100 + m, t, step_time_s=0.05)
        bus.handle(core.tick(bus.now))
    for sync, t in zip(learners, transports):    # deliver what is still in flight
        for h, c in t.poll_globals():
            sync.offer(h, c)
        sync.apply_globals()
    mean = {k: np.mean([t[k] for t in targets], axis=0) for k in SHAPES}
    return core, bus, learners, init, mean


@pytest.mark.timeout(120)
def test_learners_converge_and_stay_bit_identical(tmp_path):
    # avg: its fixed point is the mean of the learners' targets (RDA's is their geometric median)
    core, bus, learners, init, mean = run(tmp_path, config=SyncConfig(num_fragments=4, inner_steps=8, alpha=0.5, merge="avg"))
    merged = [e for e in bus.events if isinstance(e, RoundMerged)]
    assert len(merged) >= 4 * 20
    assert all(set(e.responders) == {"l0", "l1", "l2"} for e in merged)
    assert not [e for e in bus.events if isinstance(e, LearnerRejected)]
    layout = learners[0].layout
    for p in learners[0].active:
        anchors = [s.anchors[p] for s in learners]
        assert all(a.tobytes() == anchors[0].tobytes() for a in anchors)          # bit-identical globals
        assert anchors[0].tobytes() == core.fragments[p].shadow.values.tobytes()
        assert all(s.versions[p] == core.fragments[p].version for s in learners)
        target = np.concatenate([mean[t.name].ravel() for t in layout.fragments[p]])
        start = np.concatenate([init[t.name].ravel() for t in layout.fragments[p]])
        theta = core.fragments[p].theta
        assert np.linalg.norm(theta - target) < 0.05 * np.linalg.norm(start - target)
    versions = {p: core.fragments[p].version for p in core.fragments}
    assert {p: s.version for p, s in snapshot.read_all(tmp_path).items()} == versions    # snapshot every merge


@pytest.mark.timeout(60)
def test_syncer_resumes_from_snapshot_and_refuses_replays(tmp_path):
    core, bus, learners, _, _ = run(tmp_path, steps=48)
    resumed = SyncerCore(core.config, run_id="r-sim")
    resumed.restore(snapshot.read_all(tmp_path), now=bus.now)
    for p in core.fragments:
        assert resumed.fragments[p].version == core.fragments[p].version
        assert resumed.fragments[p].shadow.values.tobytes() == core.fragments[p].shadow.values.tobytes()
        assert np.array_equal(resumed.fragments[p].theta, core.fragments[p].theta)
        assert resumed.learners["l0"].credited_to[p] == core.learners["l0"].credited_to[p] > 0   # goodput credit survives
    sync = learners[0]
    p = sync.active[0]
    sync.step = core.learners["l0"].last_step[p]          # replay the newest push of fragment p: its step, on the
    push = sync._push(p)                                  # base version it was admitted on (duplicates are keyed on both)
    header = push.header.model_copy(update={"base_version": core.learners["l0"].last_base[p]})
    outs = resumed.receive(*split_chunks(header, push.payload)[0], bus.now)
    assert [o.reason for o in outs if isinstance(o, LearnerRejected)] == ["duplicate"]


class LossyWire(Wire):
    """A wire whose broadcasts are lost while `lose` is set: the syncer merged and snapshotted, then died
    before its broadcast went out."""

    lose = False

    def chunk(self, h, chunk) -> None:
        if not self.lose:
            super().chunk(h, chunk)


class SlowDiskWire(Wire):
    """A wire whose background snapshot writes never finish while `stall` is set (the syncer dies with them in
    flight); it notes the newest version whose first chunk went out, as the global streams' last message tells."""

    stall = False

    def __init__(self, core: SyncerCore, tmp_path) -> None:
        super().__init__(core, tmp_path)
        self.went_out: dict[int, int] = {}

    def chunk(self, h, chunk) -> None:
        super().chunk(h, chunk)
        if h.chunk == 0:
            self.went_out[h.fragment] = max(self.went_out.get(h.fragment, -1), h.version)

    def snapshot_later(self, snap) -> None:
        if not self.stall:
            super().snapshot(snap)


def two_learners(bus: Wire, config: SyncConfig, seed: int) -> tuple[list[DilocoSync], list]:
    rng = np.random.default_rng(seed)
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    learners = [DilocoSync(DictArrays(init), config, run_id="r-sim", learner=f"l{m}", clock=lambda: bus.now) for m in range(2)]
    transports = [bus.transport(f"l{m}") for m in range(2)]
    for sync, t in zip(learners, transports):
        for push in sync.init_pushes():
            t.send_push(push.header, push.payload)
    return learners, transports


def lockstep(bus: Wire, learners: list[DilocoSync], transports: list, first: int, last: int) -> None:
    """Inner steps `first`..`last` of every learner (a step toward 1.0), the syncer ticked after each."""
    for step in range(first, last + 1):
        bus.now = step * 0.05
        for sync, t in zip(learners, transports):
            for value in sync.arrays.values.values():
                value -= 0.05 * (value - 1.0)
            sync.step_boundary(step, 100, t, step_time_s=0.05)
        bus.handle(bus.core.tick(bus.now))


def merged(bus: Wire) -> list[RoundMerged]:
    return [e for e in bus.events if isinstance(e, RoundMerged)]


@pytest.mark.timeout(120)
def test_a_broadcast_lost_with_a_killed_syncer_does_not_leave_learners_stuck(tmp_path):
    """The successor restores the snapshot written before the lost broadcast; the learners, one delta short,
    recover from the keyframe it sends and every fragment keeps merging (they were refused as stale forever)."""
    config = SyncConfig(num_fragments=4, inner_steps=8, alpha=0.5)
    bus = LossyWire(SyncerCore(config, run_id="r-sim"), tmp_path)
    learners, transports = two_learners(bus, config, seed=3)
    lockstep(bus, learners, transports, 1, 40)
    bus.lose, before = True, len(merged(bus))
    step = 41
    while len(merged(bus)) == before:
        lockstep(bus, learners, transports, step, step)
        step += 1
    bus.lose = False                                                  # the syncer dies here; its successor:
    lost = merged(bus)[-1]
    bus.core = SyncerCore(config, run_id="r-sim")
    bus.handle(bus.core.restore(snapshot.read_all(tmp_path), now=bus.now))
    versions_at_restore = {p: f.version for p, f in bus.core.fragments.items()}
    lockstep(bus, learners, transports, step, step + 120)
    for sync in learners:
        for p in sync.active:
            assert sync.versions[p] == bus.core.fragments[p].version, f"fragment {p} (lost: {lost.fragment})"
            assert sync.anchors[p].tobytes() == bus.core.fragments[p].shadow.values.tobytes()
    assert all(bus.core.fragments[p].version >= v + 4 for p, v in versions_at_restore.items()), "every fragment merges on"


@pytest.mark.timeout(120)
def test_a_syncer_killed_before_its_background_snapshots_are_durable_resumes_past_every_version_that_went_out(tmp_path):
    """Snapshots are written after their broadcast: a syncer killed with writes in flight leaves learners holding
    versions its successor's snapshot lacks. The successor resumes past the newest version that went out (a
    keyframe of its restored values), so no version number names two values, nobody is refused `future_base`,
    and the learners end bit-identical to it."""
    config = SyncConfig(num_fragments=4, inner_steps=8, alpha=0.5)
    bus = SlowDiskWire(SyncerCore(config, run_id="r-sim"), tmp_path)
    learners, transports = two_learners(bus, config, seed=4)
    lockstep(bus, learners, transports, 1, 40)
    durable = {p: s.version for p, s in snapshot.read_all(tmp_path).items()}
    assert durable == {p: f.version for p, f in bus.core.fragments.items()}
    bus.stall, before = True, len(merged(bus))
    step = 41
    while len(merged(bus)) < before + 6:                              # six versions out, none of them durable
        lockstep(bus, learners, transports, step, step)
        step += 1
    bus.stall = False                                                 # the syncer dies here; its successor:
    for sync, t in zip(learners, transports):                        # what was in flight reaches them
        for h, c in t.poll_globals():
            sync.offer(h, c)
        sync.apply_globals()
    went_out = dict(bus.went_out)
    ahead = {p: v for p, v in went_out.items() if v > durable[p]}
    assert ahead and all(sync.versions[p] == v for sync in learners for p, v in ahead.items()), "learners hold them"
    bus.core, handled = SyncerCore(config, run_id="r-sim"), len(bus.events)
    outputs = bus.core.restore(snapshot.read_all(tmp_path), now=bus.now, published=went_out)
    bus.handle(outputs)
    restored = {e.fragment: (e.snapshot_version, e.published_version, e.global_version)
                for e in outputs if isinstance(e, FragmentRestored)}
    assert restored == {p: (durable[p], went_out[p], went_out[p] + 1 if p in ahead else durable[p]) for p in durable}
    lockstep(bus, learners, transports, step, step + 120)
    after = bus.events[handled:]
    assert not [e for e in after if isinstance(e, LearnerRejected) and e.reason == "future_base"]
    versions = [(e.fragment, e.global_version) for e in after if isinstance(e, RoundMerged)]
    assert all(v > went_out[p] + 1 for p, v in versions if p in ahead), "no version number is given twice"
    for sync in learners:
        for p in sync.active:
            assert sync.versions[p] == bus.core.fragments[p].version
            assert sync.anchors[p].tobytes() == bus.core.fragments[p].shadow.values.tobytes()
    assert all(bus.core.fragments[p].version >= went_out[p] + 4 for p in ahead), "every fragment merges on"
