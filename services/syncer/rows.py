"""One fragment's f32 rows: Θ, Nesterov momentum b and the round's pushes in one array, with running bounds of
|Θ| and |b| (the outer step in merge.py reads them all in one pass per chunk). A push from a sparse codec may be
kept as (indices, values) instead of its row (`sparse`, by buffer slot; services/syncer/sparse.py)."""
from __future__ import annotations

import math

import numpy as np

from yeto.schemas.codecs.base import Codec
from yeto.services.syncer.backend import GPU, xp
from yeto.services.syncer.gram import gram_row
from yeto.services.syncer.sparse import SparsePush

CHUNK = 1 << 24 if GPU else 1 << 15   # CPU: 32K values = 128 KiB per row, the working set stays in L2


class FragmentRows:
    """One fragment's f32 state: row 0 theta, row 1 Nesterov momentum b, rows 2.. the round's pushes."""

    def __init__(self, theta, momentum=None, *, slots: int = 4) -> None:
        n = theta.size
        self.rows = xp.zeros((2 + slots, n), dtype=xp.float32)
        self.rows[0] = xp.asarray(theta, dtype=xp.float32).reshape(-1)
        if momentum is not None:
            self.rows[1] = xp.asarray(momentum, dtype=xp.float32).reshape(-1)
        self.theta_bound = self.momentum_bound = math.inf
        self.sparse: dict[int, SparsePush] = {}   # buffer slot -> its push, whose dense row is not written
        self.kept: set[int] = set()               # buffer slots whose push is kept encoded (in `encoded`), its row not written
        self.encoded = np.zeros((0, 0), dtype=np.uint8)   # by slot: a kept push's bytes (q4 `keep`), reused round to round
        self.kept_codec: Codec | None = None
        self.momentum_sq = 0.0 if momentum is None else float(gram_row(self.rows[1:2], self.rows[1])[0])   # |b|^2, carried

    @property
    def numel(self) -> int:
        return self.rows.shape[1]

    @property
    def theta(self):
        return self.rows[0]

    @property
    def momentum(self):
        return self.rows[1]

    def push(self, slot: int):
        """The row push `slot` is decoded into (grown when the round has more pushes than slots)."""
        if 2 + slot >= self.rows.shape[0]:
            grown = xp.zeros((2 * (2 + slot), self.numel), dtype=xp.float32)
            grown[:self.rows.shape[0]] = self.rows
            self.rows = grown
        return self.rows[2 + slot]

    def keep_sparse(self, slot: int, push: SparsePush | None) -> None:
        """Push buffer slot `slot` is `push` (None: its dense row holds it)."""
        if push is None:
            self.sparse.pop(slot, None)
        else:
            self.sparse[slot] = push

    def keep_encoded(self, slot: int, codec: Codec, payload, numel: int):
        """Push buffer slot `slot` is kept as its encoded bytes (`codec.keep`; ValueError for a payload of the wrong
        size), not decoded into its row; the bytes' row of `encoded` is returned."""
        size = codec.encoded_size(numel)
        if self.encoded.shape[1] != size or self.encoded.shape[0] <= slot:
            grown = np.empty((max(slot + 1, self.rows.shape[0] - 2), size), dtype=np.uint8)
            if self.encoded.shape[1] == size:
                grown[:self.encoded.shape[0]] = self.encoded
            self.encoded = grown
        codec.keep(payload, numel, self.encoded[slot])    # type: ignore[attr-defined]
        self.kept.add(slot)
        self.kept_codec = codec
        return self.encoded[slot]

    def kept_of(self, num: int) -> tuple[np.ndarray, np.ndarray] | None:
        """For the merge's passes over [b, push 0, ..., push num-1]: (slot_of, encoded), slot_of[i] the row of
        `encoded` that holds row i's push (-1: read the row itself); None when no push among them is kept."""
        if not any(s < num for s in self.kept):
            return None
        slot_of = np.full(num + 1, -1, dtype=np.int64)
        for s in self.kept:
            if s < num:
                slot_of[1 + s] = s
        return slot_of, self.encoded

    def move(self, source: int, target: int) -> None:
        """Push buffer slot `source` replaces slot `target` (a newer push of the same learner)."""
        self.keep_sparse(target, self.sparse.pop(source, None))
        if source in self.kept:
            self.encoded[target] = self.encoded[source]
            self.kept.discard(source)
            self.kept.add(target)
            return
        self.kept.discard(target)
        if target not in self.sparse:
            self.push(target)[:] = self.push(source)

    def densify(self) -> None:
        """Every sparse or kept push written into its dense row (for a dense push's Gram row, or a dense step)."""
        for slot, push in sorted(self.sparse.items()):
            push.scatter(self.push(slot))
        self.sparse.clear()
        self.unkeep()

    def unkeep(self) -> None:
        """Every push kept encoded decoded into its dense row (a sparse push's products read the dense rows)."""
        for slot in sorted(self.kept):
            assert self.kept_codec is not None
            self.kept_codec.decode(self.encoded[slot], self.numel, out=self.push(slot))
        self.kept.clear()

    def clear_round(self) -> None:
        """The round merged: no push is held as sparse entries or kept bytes any more (their buffers are reused)."""
        self.sparse.clear()
        self.kept.clear()

    def refresh_bounds(self) -> None:
        self.theta_bound, self.momentum_bound = absmax(self.theta), absmax(self.momentum)


def absmax(a, chunk: int = CHUNK) -> float:
    """max |a| in one chunked pass (no whole-array temporary); inf if `a` holds a NaN."""
    top = 0.0
    for start in range(0, a.size, chunk):
        part = a[start:start + chunk]
        top = max(top, float(part.max()), -float(part.min()))
        if top != top:
            return math.inf
    return top
