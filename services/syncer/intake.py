"""A chunk's way in: admission's first stage before anything is kept, then reassembly under pending-byte caps.

The stage (admission/header.py) checks the header against the owner, subject, tape and layout; the caps are sized
from the run's fragments (docs/PROTOCOL.md, validation)."""
from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from yeto.schemas import codecs
from yeto.schemas.codecs.base import fused
from yeto.schemas.fragments import DEFAULT_MAX_BYTES, ChunkAssembler, FragmentError, FragmentHeader, join
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import admission
from yeto.services.syncer.admission import Rejection
from yeto.services.syncer.roster import Roster


@dataclass
class Taken:
    """What one chunk came to: the whole payload once its message is complete, refusals (of it, or of partial
    messages evicted to make room: one event per message), and why it was refused (None: it was kept)."""

    payload: bytes | memoryview | None = None
    rejections: list[tuple[FragmentHeader, Rejection]] = field(default_factory=list)
    refused: str | None = None


class HashingAssembler(ChunkAssembler):
    """The ChunkAssembler whose payload hash runs beside the intake: each chunk, once checked and kept, is added to
    its message's running SHA-256 by a worker thread (hashlib releases the GIL) while the next chunk is checked, so
    the whole-payload check at the end waits for at most one chunk's hash instead of hashing the payload again.
    Chunks that arrive out of order (or kernels other than "compiled", for the benchmarks' side-by-side runs) fall
    back to the ChunkAssembler's one hash of the joined payload; the result and every refusal are the same. A message
    named by its chunks' digests (`digest` "chunks": pushes since 2026-12-05) is not hashed whole at all."""

    def __init__(self) -> None:
        super().__init__()
        self._running: dict[tuple[object, ...], tuple[int, Any, Future[None] | None]] = {}
        self._dropped: tuple[tuple[object, ...], tuple[int, Any, Future[None] | None]] | None = None

    def add(self, header: FragmentHeader, chunk: bytes) -> bytes | memoryview | None:
        payload = super().add(header, chunk)
        key = header.message_key
        entry = self.pending.get(key)
        if payload is None and entry is not None and fused() and header.digest == "payload":   # "chunks": nothing to hash
            following, hasher, last = self._running.get(key, (0, hashlib.sha256(), None))
            if header.chunk == following:                       # in order: hashed beside what comes next
                self._running[key] = (following + 1, hasher, _worker().submit(hasher.update, entry[1][header.chunk]))
            elif header.chunk > following:                     # a gap: the joined payload is hashed at the end
                self._running[key] = (-1, hasher, last)
        return payload

    def whole(self, header: FragmentHeader, parts: list[bytes]) -> bytes | memoryview:
        dropped, self._dropped = self._dropped, None           # the base class drops a message just before this
        following, hasher, last = dropped[1] if dropped is not None and dropped[0] == header.message_key else (-1, None, None)
        if following != len(parts) - 1 or hasher is None:
            return super().whole(header, parts)
        if last is not None:
            last.result()
        hasher.update(parts[-1])
        if hasher.hexdigest() != header.sha256:
            raise FragmentError("corrupt_chunk", "the reassembled payload fails its SHA-256 checksum")
        return join(header, parts)                             # a push: into a pooled buffer (fragments.py)

    def _drop(self, key: tuple[object, ...]) -> None:
        """A message completed or evicted: its running hash leaves the table (kept one call for `whole`)."""
        super()._drop(key)
        state = self._running.pop(key, None)
        self._dropped = (key, state) if state is not None else None


_workers: list[ThreadPoolExecutor] = []


def _worker() -> ThreadPoolExecutor:
    """The one hashing thread of the process's assemblers (made on first use): it takes chunks in the order sent."""
    if not _workers:
        _workers.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="yeto-intake-sha256"))
    return _workers[0]


class Intake:
    def __init__(self, run_id: str, owned: frozenset[int] | None) -> None:
        self.run_id, self.owned = run_id, owned
        self.assembler = HashingAssembler()

    def take(self, h: FragmentHeader, chunk: bytes, *, sender: str | None, tape: Roster | None, config: SyncConfig,
             fingerprint: str | None, numels: dict[int, int]) -> Taken:
        """`numels`: values per fragment with a version 0; `sender`: the subject's learner (None: not checked)."""
        refusal = admission.chunk(h, run_id=self.run_id, sender=sender, owned=self.owned, roster=tape,
                                  fingerprint=fingerprint, numel=numels.get(h.fragment))
        if refusal is not None:                       # one event per message, on its chunk 0; nothing was kept
            sent = h if sender in (None, h.learner) else h.model_copy(update={"learner": sender})   # the subject's, not the claim
            return Taken(rejections=[(sent, refusal)] if h.chunk == 0 else [], refused=refusal.reason)
        self._size(config, numels, tape)
        taken = Taken()
        try:
            taken.payload = self.assembler.add(h, chunk)
        except FragmentError as e:
            taken.rejections.append((h, admission.assembly(e)))
            taken.refused = e.reason
        taken.rejections[:0] = [(old, admission.evicted(old)) for old in self.assembler.evicted]
        self.assembler.evicted.clear()
        return taken

    def _size(self, config: SyncConfig, numels: dict[int, int], tape: Roster | None) -> None:
        """Per sender 2 f32 copies of the largest fragment; in all, one such per announced learner (at least 2),
        or SyncConfig.max_pending_bytes; 16 GiB while no fragment has a version 0 (sizes are not known yet)."""
        largest = max((codecs.F32.encoded_size(n) for n in numels.values()), default=0)
        learners = len(tape.generations) if tape is not None else 1
        self.assembler.max_sender_bytes = 2 * largest if largest else DEFAULT_MAX_BYTES
        total = self.assembler.max_sender_bytes * max(2, learners) if largest else DEFAULT_MAX_BYTES
        self.assembler.max_pending_bytes = config.max_pending_bytes or total
