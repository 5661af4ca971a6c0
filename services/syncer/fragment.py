"""One fragment a syncer owns: its rows (Θ, momentum, the round's pushes), round, Gram matrix, shadow, snapshot clock.

A push goes through it in order: `take_in` (decode with its Gram row), `add` (join the round), then, when
services/syncer/rounds.py decides, `merge` (weights, avg/RDA from G, the fused outer step) and `publish`
(the new version through the broadcast shadow, and whether a snapshot is due before it goes out).
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.codecs.base import compiled, spreading
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import backend, gram, merge, sparse
from yeto.services.syncer.broadcast import Shadow
from yeto.services.syncer.rounds import Round
from yeto.services.syncer.rows import FragmentRows
from yeto.services.syncer.snapshot import CopiedSnapshot, Copy, FragmentSnapshot, SnapshotBuffers, copy_later
from yeto.services.syncer.sparse import SparsePush, sparse_merge

SNAPSHOT_BUFFERS = SnapshotBuffers(backend.host_buffer)
"""The arrays every fragment's snapshots are copied into, one pool per syncer process (snapshot.py)."""


class FragmentState:
    """Everything the syncer holds of one fragment; SyncerCore routes each push to its fragment's state."""

    def __init__(self, rows: FragmentRows, shadow: Shadow, *, version: int = 0, init_sha: str | None = None) -> None:
        self.fragment, self.rows, self.shadow, self.init_sha = shadow.fragment, rows, shadow, init_sha
        self.round = Round(shadow.fragment, version=version)
        self.gram = gram.RoundGram()
        self.since_snapshot = 0                 # versions published since the last snapshot
        self.snapshot_buffers = SNAPSHOT_BUFFERS
        self.copying: Copy | None = None        # the last snapshot's copy, on the copier thread (snapshot.py)
        self.norm: ThetaNorm | None = None      # Θ's norm of a version, for admission's bound (`theta_norm`)

    @classmethod
    def adopt(cls, h: FragmentHeader, values: np.ndarray, run_id: str, config: SyncConfig) -> FragmentState:
        """Version 0 from a learner's init (`h.sha256` is kept: a later init with other bytes is refused)."""
        return cls(FragmentRows(values), _shadow(run_id, h.fragment, h.fingerprint, h.role, config), init_sha=h.sha256)

    @classmethod
    def restored(cls, s: FragmentSnapshot, run_id: str, config: SyncConfig, *, version: int | None = None) -> FragmentState:
        """The snapshot's state, as `version` (default: the snapshot's; a later one when versions went out after it)."""
        version = s.version if version is None else version
        shadow = _shadow(run_id, s.fragment, s.fingerprint, s.role, config)
        state = cls(FragmentRows(s.theta, s.momentum), shadow, version=version)
        state.shadow.reset(version, s.shadow)
        return state

    @property
    def version(self) -> int:
        return self.round.version

    @property
    def numel(self) -> int:
        return self.rows.numel

    @property
    def theta(self):
        return self.rows.theta

    # -- one push, in order ----------------------------------------------------------------------------
    def take_in(self, h: FragmentHeader, payload: bytes) -> np.ndarray:
        """Decode push `h` into a free row and return its products with the rows in: first with the momentum b,
        then its row of G (float64 sums of f32 products; the last entry is its squared norm, not finite if the
        push is not). On the CPU they are taken as each stretch is decoded, while it is in cache (no second read).
        A sparse codec's push on the CPU is kept as (indices, values) instead, its row never written (sparse.py).
        On the CPU with the fused kernels (gram.at_merge) a dense push, unless sparse pushes are in, is decoded with its
        squared norm alone, the one entry returned: its products with b and the other pushes are taken at the merge,
        in one pass over the rows (the same bits). A q4 push there is not decoded at all (gram.kept): its bytes are kept
        and its squared norm taken from pieces decoded in cache; the merge's passes decode it again (the same bits)."""
        k = len(self.round.pending)
        codec = codecs.codec(h.codec)
        if sparse_merge(codec):                 # (indices, values): no dense row (services/syncer/sparse.py)
            push = SparsePush(*codec.decode_entries(payload, h.numel))
            self.rows.unkeep()                  # a sparse push's products read the dense pushes' rows
            earlier = [self.rows.sparse.get(i) for i in range(k)]            # the round's pushes in, by buffer slot
            dense = [self.rows.momentum] + [self.rows.push(i) if p is None else None for i, p in enumerate(earlier)]
            products = sparse.products(push, dense, [None] + earlier)
            self.rows.keep_sparse(k, push)
            return products
        self.rows.keep_sparse(k, None)
        self.rows.kept.discard(k)
        if gram.kept(codec) and not self.rows.sparse:   # kept encoded: the merge's passes decode it (gram.py)
            return np.array([gram.kept_norm(codec, self.rows.keep_encoded(k, codec, payload, h.numel), h.numel)])
        row = self.rows.push(k)                 # a free row: a superseded push stays intact until this one is added
        if gram.at_merge() and not self.rows.sparse:   # its other products: the merge's one pass over the rows (gram.py)
            return np.array([gram.decode_with_norm(codec, payload, h.numel, row)])
        self.rows.densify()                     # a dense push's Gram row reads the rows in
        acc = gram.RowProducts(self.rows.rows[1:2 + k + 1], row)     # b, the round's pushes, this one
        if backend.GPU:                         # decoded on the device: only the encoded bytes cross over
            backend.decode_into(codec, payload, h.numel, row)
            acc(0, row.size)
        else:
            acc.decode(codec, payload, h.numel)
        return acc.products

    def add(self, h: FragmentHeader, now: float, products: np.ndarray) -> None:
        """The push just taken in joins the round; a newer push of the same learner replaces its row."""
        k = len(self.round.pending)
        old = self.round.pending.get(h.learner)
        if old is not None:
            self.rows.move(k, old.slot)
        slot = self.round.add(h, now).slot
        if products.size == 1:                  # its squared norm alone (take_in): the rest at the merge
            self.gram.admit_later(slot, float(products[0]))
        else:
            self.gram.admit(slot, products[1:], momentum_product=float(products[0]))

    def merge(self, headers: list[FragmentHeader], config: SyncConfig,
              clock: Callable[[], float]) -> tuple[merge.Combination | None, np.ndarray, list[int], float]:
        """Merge the round's pushes with one outer step and close the round: (the combination taken, None when
        the result would not be finite; normalised weights; staleness; seconds taken)."""
        lags = [self.version - h.base_version for h in headers]
        weights = merge.push_weights([h.c_tokens for h in headers], [h.c_steps for h in headers], lags,
                                     weighting=config.weighting, staleness_discount=config.staleness_discount)
        if not weights.sum() > 0:               # no token counts at all: equal weights
            weights = np.ones(len(headers))
        mode = "avg" if self.shadow.role == "embed" else config.merge
        self.settle()                           # Θ and b are written below: the last snapshot's copy is done first
        started = clock()
        if self.gram.later and self.rows.sparse:    # a sparse push beside one whose products are left to here
            self.rows.densify()
        g, bd = self.gram.take(len(headers), self.rows.rows,   # every push of the round came through take_in and add
                               self.rows.kept_of(len(headers)))
        fraction = merge.interval_fraction([h.c_steps for h in headers], weights, config.inner_steps)
        combo = merge.merge_round(self.rows, len(headers), weights, merge=mode, lr=config.outer_lr, momentum=config.momentum,
                                  g=g, bd=bd, fraction=fraction, restart=config.momentum_restart,
                                  restart_cos=config.momentum_restart_cos)
        backend.synchronize()
        elapsed = clock() - started
        self.rows.clear_round()
        self.round.close(merged=combo is not None, sync_s=elapsed)
        return combo, weights / weights.sum(), lags, elapsed

    def publish(self, snapshot_every: int) -> tuple[list[tuple[FragmentHeader, bytes]], bool]:
        """The current version's broadcast messages, and whether a snapshot must be written before them."""
        self.settle()                           # the shadow advances below
        messages = self.shadow.publish(self.version, backend.to_host(self.theta))
        self.since_snapshot += 1
        due = self.version == 0 or self.since_snapshot >= snapshot_every
        if due:
            self.since_snapshot = 0
        return messages, due

    def repair(self, base_version: int) -> list[tuple[FragmentHeader, bytes]]:
        """A keyframe of the current version for learners stuck at `base_version`, unless one newer than it went
        out already (they fetch that one and apply the deltas they hold after it). Learners stuck behind a
        delta that never reached them (a syncer killed between its snapshot and the broadcast, a publish lost
        with a node) get no new version otherwise: every push of theirs is refused as stale."""
        if self.shadow.values is None or (self.shadow.keyframed is not None and self.shadow.keyframed > base_version):
            return []
        return [self.shadow.keyframe()]

    # -- snapshots and the final cut -------------------------------------------------------------------
    def snapshot(self, ledger: dict[str, dict]) -> FragmentSnapshot:
        """The fragment as of now: Θ, momentum, the broadcast shadow, version, and the learners' `ledger` of it. On the
        host the three rows are copied by the copier thread (snapshot.py `copy_later`), begun when the snapshot's
        SaveSnapshot is performed, after the broadcast's chunks (outputs.py; beside them until 2026-12-06): the
        snapshot's readers wait for the copy (and begin it if nothing did), and so does this fragment's next write of
        Θ, b or the shadow (`settle`), so the snapshot holds this version's values."""
        self.settle()
        theta, momentum, shadow = self.snapshot_buffers.take(self.numel)     # reused once no snapshot holds them
        fields = dict(fragment=self.fragment, version=self.version, fingerprint=self.shadow.fingerprint,
                      role=self.shadow.role, ledger=ledger)
        if backend.GPU:                         # from the device: here, into pinned buffers
            return FragmentSnapshot(theta=backend.copy_to_host(self.theta, theta),
                                    momentum=backend.copy_to_host(self.rows.momentum, momentum),
                                    shadow=backend.copy_to_host(self.shadow.values, shadow), **fields)
        self.copying = copy_later([(self.theta, theta), (self.rows.momentum, momentum), (self.shadow.values, shadow)],
                                  deferred=True)         # begun when performed: after the broadcast's chunks (outputs.py)
        return CopiedSnapshot(self.copying, theta=theta, momentum=momentum, shadow=shadow, **fields)

    def settle(self) -> None:
        """Wait for the last snapshot's copy and for Θ's norm where it is being taken (before Θ, b or the shadow is
        written in place)."""
        if self.copying is not None:
            self.copying.wait()
            self.copying = None
        if self.norm is not None:
            self.norm.settle()

    # -- Θ's norm, for admission's bound -------------------------------------------------------------------
    def theta_norm(self) -> ThetaNorm:
        """This version's ||Θ|| (made on first ask; admission's bound reads `value()`): on the host with the kernels on
        the threads, sqrt(gram.sq_norm(Θ)) (pieces' f32 dots added in order: the same bits on any thread count), else
        the backend's own norm (on the GPU, on the device)."""
        if self.norm is None or self.norm.version != self.version:
            on_host = not backend.GPU and compiled() and spreading()
            theta = self.theta
            self.norm = ThetaNorm(self.version, (lambda: math.sqrt(gram.sq_norm(theta))) if on_host
                                  else (lambda: float(backend.xp.linalg.norm(theta))), background=on_host)
        return self.norm

    def norm_later(self) -> Callable[[], None] | None:
        """What begins this version's Θ norm on a thread of its own (core.py hands it to the version's last Broadcast,
        so it begins once the broadcast's chunks are out: outputs.py), where the host takes it; None on the GPU and
        with the kernels off the threads, where the first push of the version takes it."""
        norm = self.theta_norm()
        return norm.start if norm.background and _NORM["after_broadcast"] else None

    def exact_keyframe(self) -> tuple[FragmentHeader, bytes]:
        """An f32 keyframe of Θ itself (not the q4-tracked shadow): the authoritative final values."""
        self.settle()
        self.shadow.reset(self.version, backend.to_host(self.theta))
        return self.shadow.keyframe()


def _shadow(run_id: str, fragment: int, fingerprint: str, role: str, config: SyncConfig) -> Shadow:
    return Shadow(run_id=run_id, fragment=fragment, fingerprint=fingerprint, role=role,
                  keyframe_every=config.keyframe_every, codec_down=config.codec_down)


_NORM = {"after_broadcast": True}


def norm_after_broadcast(on: bool) -> None:
    """Whether a version's Θ norm begins on its own thread once its broadcast's chunks are out (the default since
    2026-12-06) or is taken by the version's first push that needs it (as before): benchmarks/round.py --norm
    first-push,after-broadcast compares the two in one run. The same value either way."""
    _NORM["after_broadcast"] = bool(on)


class ThetaNorm:
    """||Θ|| of one version, taken once: on a thread of its own when `start`ed (after the version's broadcast, off the
    next round's first push: until 2026-12-06 that push took it, 0.85 against 1.165 G values/s of CPU for a later one),
    or by the first `value()` on the caller's thread when nobody started it. Θ is not written while it is being read
    (FragmentState.settle waits); a push is checked against its own version's norm (`version`)."""

    def __init__(self, version: int, compute: Callable[[], float], *, background: bool) -> None:
        self.version, self.background, self._compute = version, background, compute
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._value, self._error = math.nan, None

    def start(self) -> None:
        if self._claim():
            threading.Thread(target=self._run, name="yeto-theta-norm", daemon=True).start()

    def value(self) -> float:
        """The norm, taken here if nobody began it, else waited for."""
        if self._claim():
            self._run()
        self._done.wait()
        if self._error is not None:
            raise RuntimeError(f"Θ's norm of version {self.version} failed: {self._error!r}") from self._error
        return self._value

    def settle(self) -> None:
        """Wait until Θ is no longer being read for it (nothing to wait for when it was never begun)."""
        with self._lock:
            started = self._started
        if started:
            self._done.wait()

    def _claim(self) -> bool:
        with self._lock:
            started, self._started = self._started, True
        return not started

    def _run(self) -> None:
        try:
            self._value = self._compute()
        except BaseException as e:  # noqa: BLE001 - raised to whoever asks for the value
            self._error = e
        finally:
            self._compute = None        # type: ignore[assignment]  # Θ no longer referenced from here
            self._done.set()
