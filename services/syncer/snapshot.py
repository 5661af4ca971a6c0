"""Atomic per-fragment snapshots: safetensors (theta, momentum, broadcast shadow) plus a JSON header.

One file per fragment, `frag-<p>.safetensors`, written to a temporary name, fsynced and renamed, so a
reader sees the old snapshot or the new one, never a torn one. The `yeto` metadata key holds the JSON
header: fingerprint, fragment, version, role and the per-learner ledger (newest generation and last
admitted step per learner), which is what resume needs to refuse replays. The arrays are streamed to the
file from where they lie and hashed on the way (no serialised copy), and read back memory-mapped (pages of
the file, not the heap): writing or restoring a model never needs a second copy of it in RAM.
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import safe_open

FORMAT = 1
NAMES = ("theta", "momentum", "shadow")


@dataclass
class FragmentSnapshot:
    fragment: int
    version: int
    fingerprint: str
    theta: np.ndarray
    momentum: np.ndarray
    shadow: np.ndarray
    role: str = "layers"
    ledger: dict[str, dict] = field(default_factory=dict)    # learner -> {"generation": g, "last_step": s}


class SnapshotBuffers:
    """The host arrays a fragment's snapshots are copied into, reused once nothing holds them any more.

    A snapshot copies Θ, the momentum and the shadow on the round's path. Into fresh arrays, each copy's first touch
    of its pages faults them in: on a VM whose memory the host backs lazily that costs tens of times the copy itself
    (`python benchmarks/snapshot_copy.py`), and on any machine more than the copy. A set is reused only while no
    reference to any of its arrays exists but the pool's own (a snapshot still queued for its writer, or kept by a
    caller, holds its arrays, so they are never overwritten under it). One pool serves every fragment of a syncer
    process (fragment.py SNAPSHOT_BUFFERS): a snapshot gets views of a set sized to the largest fragment seen, and at
    most KEEP sets are kept, enough for one being written while the next is filled. The memory it holds is KEEP x 3
    rows of the largest fragment, where a pool per fragment held that for every fragment (the syncer's memory model
    missed it by 22%: tests/training/test_training_syncer_memory.py). `alloc` makes a set's arrays (pinned host memory
    on a GPU head, so the device copies into it directly)."""

    KEEP = 2

    def __init__(self, alloc=None) -> None:
        self.sets: list[list[np.ndarray]] = []
        self.alloc = alloc or (lambda n: np.empty(n, dtype=np.float32))

    def take(self, n: int) -> tuple[np.ndarray, ...]:
        """Three arrays of `n` float32 values (theta, momentum, shadow) that nobody else holds: views of a free set at
        least that large. While the tuple, or any of its arrays, is kept, the set is not handed out again."""
        for bufs in self.sets:
            if bufs[0].size >= n and all(_only_here(bufs, i) for i in range(len(bufs))):
                return tuple(b[:n] for b in bufs)
        size = max([n] + [b[0].size for b in self.sets])
        bufs = [self.alloc(size) for _ in NAMES]
        self.sets = [b for b in self.sets if b[0].size == size][-(self.KEEP - 1):] + [bufs]   # smaller sets go
        return tuple(b[:n] for b in bufs)


class Copy:
    """Arrays copied into a snapshot's on the copier thread, off the round's critical path (`copy_later`). Whoever reads
    the snapshot's arrays waits for it (`CopiedSnapshot`); whoever writes the sources waits first (`wait`: the fragment
    does before its next outer step and broadcast), so the snapshot holds the values of its own version."""

    def __init__(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.pairs: list[tuple[np.ndarray, np.ndarray]] | None = pairs
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._started = False
        self._start_lock = threading.Lock()

    def start(self) -> None:
        """Hand the copy to the copier thread, once (`wait` does, if nobody did before)."""
        with self._start_lock:
            if self._started:
                return
            self._started = True
        with _copier_lock:
            if not _copier:
                _copier.append(threading.Thread(target=_copy_forever, name="yeto-snapshot-copy", daemon=True))
                _copier[0].start()
        _copies.put(self)

    def run(self) -> None:
        try:
            for source, target in self.pairs or []:
                np.copyto(target, source)             # NumPy releases the GIL for the copy
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits
            self.error = e
        finally:
            self.pairs = None                          # no reference to a pooled array left here once done
            self.done.set()

    def wait(self) -> None:
        if not self.done.is_set():
            self.start()
        self.done.wait()
        if self.error is not None:
            raise RuntimeError(f"a snapshot's copy failed: {self.error!r}") from self.error


_copies: queue.SimpleQueue[Copy] = queue.SimpleQueue()
_copier: list[threading.Thread] = []
_copier_lock = threading.Lock()


_AFTER = {"chunks": True}


def copy_after_chunks(on: bool) -> None:
    """Whether a round's snapshot copy starts when its SaveSnapshot is performed, after the broadcast's chunks (the
    default since 2026-12-06: outputs.py `calls`), or as the snapshot is made, beside the chunks (a01c8f7 to then: on a
    head with few cores the copier took a core and memory bandwidth from the chunks' hashing, which is on the path).
    benchmarks/round.py --copy beside,after compares the two in one run."""
    _AFTER["chunks"] = bool(on)


def copy_later(pairs: list[tuple[np.ndarray, np.ndarray]], *, deferred: bool = False) -> Copy:
    """Copy each (source, target) on the process's copier thread (made on first use), in the order asked. `deferred`
    (and `copy_after_chunks`): not begun until its `start`, or its `wait` (whoever reads the copy, or writes a source,
    waits for it: so it holds the values of when it was made as long as nothing writes them before either)."""
    job = Copy(pairs)
    if not (deferred and _AFTER["chunks"]):
        job.start()
    return job


def _copy_forever() -> None:
    while True:
        job = _copies.get()
        job.run()
        del job                                        # its arrays' holders are the snapshot's and the pool's alone


class CopiedSnapshot(FragmentSnapshot):
    """A FragmentSnapshot whose arrays are being filled by a `Copy`: reading one waits until the copy is done (and starts
    it, if it was deferred and nothing started it yet)."""

    copy: Copy

    def __init__(self, copy: Copy, **fields: object) -> None:
        self.copy = copy
        super().__init__(**fields)  # type: ignore[arg-type]

    def _array(self, name: str) -> np.ndarray:
        self.copy.wait()
        return self.__dict__["_" + name]  # type: ignore[no-any-return]

    def _keep(self, name: str, value: np.ndarray) -> None:
        self.__dict__["_" + name] = value

    theta = property(lambda self: self._array("theta"), lambda self, v: self._keep("theta", v))  # type: ignore[assignment]
    momentum = property(lambda self: self._array("momentum"), lambda self, v: self._keep("momentum", v))  # type: ignore[assignment]
    shadow = property(lambda self: self._array("shadow"), lambda self, v: self._keep("shadow", v))  # type: ignore[assignment]


def _only_here(bufs: list[np.ndarray], i: int) -> bool:
    """No reference to `bufs[i]` but the list's (getrefcount counts its own argument too), and no view of it (a view
    holds its base)."""
    return sys.getrefcount(bufs[i]) == 2


def path_of(directory: Path, fragment: int) -> Path:
    return Path(directory) / f"frag-{fragment:04d}.safetensors"


def write(directory: Path, snap: FragmentSnapshot) -> tuple[Path, str]:
    """Write atomically, one array at a time straight from memory; return (path, sha256 of the file)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    header = dict(format=FORMAT, fragment=snap.fragment, version=snap.version, fingerprint=snap.fingerprint,
                  role=snap.role, ledger=snap.ledger)
    arrays = [(name, np.ascontiguousarray(getattr(snap, name), dtype="<f4").reshape(-1)) for name in NAMES]
    final = path_of(directory, snap.fragment)
    tmp = final.with_suffix(f".tmp{os.getpid()}")
    digest = hashlib.sha256()
    with open(tmp, "wb") as f:
        meta = {"yeto": json.dumps(header, sort_keys=True)}
        for part in (_header(arrays, meta), *(memoryview(a).cast("B") for _, a in arrays)):
            digest.update(part)
            f.write(part)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)                 # the rename itself must survive a crash
    finally:
        os.close(dir_fd)
    return final, digest.hexdigest()


def _header(arrays: list[tuple[str, np.ndarray]], metadata: dict[str, str]) -> bytes:
    """The safetensors header: little-endian u64 length, then JSON padded with spaces to 8 bytes."""
    entries: dict = {"__metadata__": metadata}
    offset = 0
    for name, a in arrays:
        entries[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def read(path: Path) -> FragmentSnapshot:
    """Load one fragment snapshot, its arrays memory-mapped read-only; ValueError naming the file when it is not a
    Yeto snapshot."""
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata() or {}
    if "yeto" not in meta:
        raise ValueError(f"{path} is not a Yeto syncer snapshot (no 'yeto' metadata); remove it or point --state elsewhere")
    header = json.loads(meta["yeto"])
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        entries = json.loads(f.read(size))
    arrays = {name: _mapped(path, 8 + size + entries[name]["data_offsets"][0], tuple(entries[name]["shape"])) for name in NAMES}
    return FragmentSnapshot(fragment=header["fragment"], version=header["version"], fingerprint=header["fingerprint"],
                            role=header.get("role", "layers"), ledger=header.get("ledger", {}), **arrays)


def _mapped(path: Path, offset: int, shape: tuple[int, ...]) -> np.ndarray:
    if not np.prod(shape):
        return np.zeros(shape, dtype=np.float32)       # mmap cannot map nothing
    return np.memmap(path, dtype="<f4", mode="r", offset=offset, shape=shape)


def read_all(directory: Path) -> dict[int, FragmentSnapshot]:
    """Every fragment snapshot in `directory` (none if it does not exist); leftover temporaries are ignored."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    snaps = (read(p) for p in sorted(directory.glob("frag-*.safetensors")))
    return {s.fragment: s for s in snaps}
