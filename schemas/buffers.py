"""Byte buffers reused from one round to the next once nothing holds them: a pool per process, per use.

A large array made fresh on every round costs its pages' first touch: on a VM whose memory the host backs lazily tens of
times the copy that fills it (`python benchmarks/snapshot_copy.py`), on any machine the page faults. The syncer's round
makes such arrays where a push is joined from its chunks (schemas/fragments.py) and where the broadcast's q4 delta is
encoded (schemas/codecs/q4.py); each takes them from a `BufferPool` instead. A buffer is handed out again only while no
reference to it exists but the pool's own (a payload still held by a caller, a view of it, a memoryview, a NumPy array
made over it with np.frombuffer: each holds the buffer), so what another holder reads is never overwritten. The pool
grows lazily: a second buffer is made only while the first is held, and at most `keep` buffers, the largest size
seen, are kept (a smaller one is dropped when a larger is needed).
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Bytes = npt.NDArray[np.uint8]


def only_here(buffer: object) -> bool:
    """No reference to `buffer` but the one of the list that keeps it (getrefcount counts its own argument too, and the
    caller's loop variable is not used): no view, memoryview or array over it is alive."""
    return sys.getrefcount(buffer) <= 3


class BufferPool:
    """uint8 buffers of at least the size asked for, each handed out only while nobody else holds it."""

    def __init__(self, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"a pool keeps at least one buffer, got keep={keep}")
        self.keep = keep
        self.buffers: list[Bytes] = []
        self._lock = threading.Lock()      # the intake's hashing thread and the data plane may take at once

    def take(self, nbytes: int) -> Bytes:
        """A view of `nbytes` bytes of a buffer nobody else holds (made when none is free). The view, and anything
        made over it, keeps the buffer out of the pool's hands until dropped."""
        with self._lock:
            for i in range(len(self.buffers)):
                if self.buffers[i].size >= nbytes and only_here(self.buffers[i]):
                    return self.buffers[i][:nbytes]
            size = max([nbytes] + [b.size for b in self.buffers])
            fresh: Bytes = np.empty(size, dtype=np.uint8)
            self.buffers = [b for b in self.buffers if b.size == size][-(self.keep - 1):] if self.keep > 1 else []
            self.buffers.append(fresh)
            return fresh[:nbytes]

    @property
    def nbytes(self) -> int:
        """The bytes the pool keeps resident."""
        return sum(b.size for b in self.buffers)


def joined(parts: list[bytes], pool: BufferPool,
           each: Callable[[Callable[[int], None], Sequence[int]], Any] | None = None) -> memoryview:
    """The parts one after another in a buffer of `pool`, as a read-only memoryview of exactly their length. `each(fn,
    indices)` calls fn for every part's index (default: in order here; schemas/fragments.py passes the kernel threads'
    `spread`: NumPy's copies release the GIL)."""
    out = pool.take(sum(len(p) for p in parts))
    starts = [0]
    for part in parts:
        starts.append(starts[-1] + len(part))

    def put(i: int) -> None:
        out[starts[i]:starts[i + 1]] = np.frombuffer(parts[i], dtype=np.uint8)

    if each is None:
        for i in range(len(parts)):
            put(i)
    else:
        each(put, range(len(parts)))
    return out.data.toreadonly()
