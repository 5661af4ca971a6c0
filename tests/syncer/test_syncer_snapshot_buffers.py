"""A fragment's snapshots are copied into host arrays reused from one snapshot to the next once nothing holds them
(services/syncer/snapshot.py SnapshotBuffers): a snapshot still held (queued for its writer, kept by a caller) is
never overwritten, and the values each snapshot holds are those of its own version."""
from __future__ import annotations

import gc

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import fragment, snapshot
from yeto.services.syncer.fragment import FragmentState
from yeto.services.syncer.snapshot import SnapshotBuffers

N = 1000


def _fragment() -> FragmentState:
    h = FragmentHeader(run_id="r", learner="l0", fragment=0, kind="init", fingerprint="f" * 64, codec="f32", numel=N,
                       c_tokens=0, c_steps=0, local_step=0, base_version=0, sha256="0" * 64)
    frag = FragmentState.adopt(h, np.zeros(N, dtype=np.float32), "r", SyncConfig(num_fragments=1))
    frag.publish(snapshot_every=1)
    return frag


def _move(frag: FragmentState, value: float) -> None:
    """A merged version: new values of theta and the momentum (what an outer step writes, once the last snapshot's copy
    is done: FragmentState.merge settles first)."""
    frag.settle()
    frag.rows.theta[:] = value
    frag.rows.momentum[:] = -value
    frag.round.version += 1


def _addresses(snap) -> list[int]:
    return [a.ctypes.data for a in (snap.theta, snap.momentum, snap.shadow)]


def test_a_released_snapshots_arrays_are_reused_and_a_held_one_is_never_overwritten():
    frag = _fragment()
    _move(frag, 1.0)
    first = frag.snapshot({})
    held = _addresses(first)
    _move(frag, 2.0)
    second = frag.snapshot({})               # the first is still held (a writer has not reached it yet)
    assert not set(_addresses(second)) & set(held)
    assert (first.theta == 1.0).all() and (first.momentum == -1.0).all() and first.version == 1
    assert (second.theta == 2.0).all() and (second.momentum == -2.0).all() and second.version == 2
    del first                               # written: nothing holds it
    gc.collect()
    _move(frag, 3.0)
    third = frag.snapshot({})
    assert _addresses(third) == held        # the first one's arrays, filled with version 3
    assert (third.theta == 3.0).all() and (third.momentum == -3.0).all() and (second.theta == 2.0).all()


def test_a_view_or_an_array_kept_from_a_snapshot_keeps_its_set_out_of_reuse():
    frag = _fragment()
    _move(frag, 1.0)
    theta = frag.snapshot({}).theta         # the snapshot object is gone, its theta kept
    part = frag.snapshot({}).momentum[10:20]      # a view keeps its base
    _move(frag, 5.0)
    frag.snapshot({})
    frag.snapshot({})
    assert (theta == 1.0).all() and (part == -1.0).all()


def test_the_pool_keeps_at_most_two_sets_and_drops_another_sizes():
    pool = SnapshotBuffers()
    held = [pool.take(N) for _ in range(4)]  # all held: a new set each time, the pool keeps the newest two
    assert len(pool.sets) == 2 and all(len({a.ctypes.data for a in s}) == 3 for s in held)
    del held
    pool.take(2 * N)                          # the fragment's size changed: the old sets go
    assert [s[0].size for s in pool.sets] == [2 * N]


def test_every_fragment_shares_one_pool_sized_to_the_largest():
    """A syncer's fragments take their snapshots' arrays from one pool: views of a set as large as the largest
    fragment, at most two sets in all, whatever the number of fragments (a pool per fragment held two sets of every
    fragment, beyond the syncer's memory model)."""
    small, large = _fragment(), _fragment()
    assert small.snapshot_buffers is large.snapshot_buffers
    pool = small.snapshot_buffers
    large.rows = type(large.rows)(np.zeros(3 * N, dtype=np.float32))     # a fragment three times the size
    large.shadow.values = np.zeros(3 * N, dtype=np.float32)
    for _ in range(5):
        _move(small, 1.0)
        _move(large, 2.0)
        a, b = small.snapshot({}), large.snapshot({})
        assert a.theta.size == N and b.theta.size == 3 * N and (a.theta == 1.0).all() and (b.theta == 2.0).all()
        del a, b
    assert len(pool.sets) <= 2 and all(s[0].size >= 3 * N for s in pool.sets)   # earlier tests' larger sets may serve


class _CopiedWhenWaitedFor(snapshot.Copy):
    """A snapshot's copy that runs only when someone first waits for it: as if the copier thread had not reached it."""

    def wait(self) -> None:
        if not self.done.is_set():
            self.run()
        super().wait()


def test_the_next_outer_step_and_broadcast_wait_for_the_snapshots_copy(monkeypatch):
    """The copy runs after the broadcast's chunks (snapshot.py copy_later); the fragment's next outer step and
    broadcast write Θ, b and the shadow in place, so they wait for it: the snapshot keeps its own version's values."""
    monkeypatch.setattr(fragment, "copy_later", lambda pairs, **_: _CopiedWhenWaitedFor(pairs))
    frag = _fragment()
    _move(frag, 1.0)
    frag.publish(snapshot_every=1)
    want = [frag.theta.copy(), frag.rows.momentum.copy(), frag.shadow.values.copy()]
    snap = frag.snapshot({})
    assert not snap.copy.done.is_set()                  # not copied yet
    payload = codecs.Q4.encode(np.random.default_rng(0).standard_normal(N).astype(np.float32))
    h = FragmentHeader(run_id="r", learner="l0", fragment=0, kind="push", fingerprint="f" * 64, codec="q4", numel=N,
                       c_tokens=10, c_steps=1, local_step=1, base_version=frag.version, sha256=sha256(payload))
    frag.add(h, 0.0, frag.take_in(h, payload))
    combo, *_ = frag.merge([h], SyncConfig(num_fragments=1, momentum=0.9), lambda: 0.0)
    frag.publish(snapshot_every=1)
    assert combo is not None and not np.array_equal(frag.theta, want[0]) and not np.array_equal(frag.shadow.values, want[2])
    assert all(np.array_equal(got, kept) for got, kept in zip((snap.theta, snap.momentum, snap.shadow), want, strict=True))


class _Sink:
    """Where a round's outputs go, recording whether the snapshot's copy had begun when each chunk went out."""

    chunk_bytes = 512

    def __init__(self) -> None:
        self.begun_at_chunks: list[bool] = []
        self.snaps: list = []
        self.copy = None

    def chunk(self, header, chunk) -> None:
        self.begun_at_chunks.append(self.copy is not None and self.copy._started)

    def event(self, event) -> None:
        pass

    def snapshot(self, snap) -> None:
        self.snaps.append(snap)

    def snapshot_later(self, snap) -> None:
        self.snaps.append(snap)

    def wake(self, at) -> None:
        pass


def test_a_rounds_snapshot_copy_begins_after_the_broadcasts_chunks_and_holds_its_version():
    """Since 2026-12-06 the copy is begun when its SaveSnapshot is performed, after the broadcast's chunks (outputs.py),
    not beside them; with `copy_after_chunks(False)` as the snapshot is made. Either way it holds its version's values."""
    from yeto.services.syncer.outputs import Broadcast, SaveSnapshot, perform

    for after in (True, False):
        snapshot.copy_after_chunks(after)
        try:
            frag = _fragment()
            _move(frag, 1.0)
            messages, due = frag.publish(snapshot_every=1)
            want = [frag.theta.copy(), frag.rows.momentum.copy(), frag.shadow.values.copy()]
            snap = frag.snapshot({})
            sink = _Sink()
            sink.copy = snap.copy
            assert snap.copy._started is not after
            perform([Broadcast(*m) for m in messages] + [SaveSnapshot(snap, background=True)], sink)
            assert due and len(sink.begun_at_chunks) > 1 and set(sink.begun_at_chunks) == {not after}
            assert snap.copy._started and sink.snaps == [snap]
            _move(frag, 2.0)                                  # the next write waits for the copy (settle)
            assert all(np.array_equal(got, w) for got, w in zip((snap.theta, snap.momentum, snap.shadow), want, strict=True))
        finally:
            snapshot.copy_after_chunks(True)


def test_a_deferred_copy_nobody_performed_is_made_before_the_next_write():
    """A snapshot whose SaveSnapshot was never performed: the fragment's next write of Θ, b or the shadow begins the copy
    and waits for it, so the snapshot still holds its own version."""
    frag = _fragment()
    _move(frag, 1.0)
    snap = frag.snapshot({})
    assert not snap.copy._started
    _move(frag, 7.0)
    assert snap.copy.done.is_set() and (snap.theta == 1.0).all() and (snap.momentum == -1.0).all()
