"""The fragment wire format: the header every push, keyframe and delta chunk carries, chunking and reassembly.

A message is one encoded fragment payload split into chunks of at most `chunk_bytes`. Each chunk travels
as one NATS message whose `Yeto-Fragment` header holds the FragmentHeader as compact JSON (docs/PROTOCOL.md).
The assembler validates sizes and checksums before it keeps anything, and holds only received chunks; a violation raises
FragmentError with a reason code the syncer records in a LearnerRejected event.

    FragmentError(ValueError)   reason: bad_header | too_large | corrupt_chunk

A header's `sha256` names the whole payload in one of two ways, said by its `digest` (docs/PROTOCOL.md): "payload", the
SHA-256 of the payload's bytes, or "chunks" (since 2026-12-05, pushes and deltas), the SHA-256 of the chunks' 32-byte
SHA-256 digests in order followed by the payload's length as 8 little-endian bytes: derived from the chunk hashes every
receiver checks anyway, so a payload is hashed once on each side instead of twice, and as binding (two payloads with one
such digest need a SHA-256 collision). Inits and keyframes keep "payload": a learner compares a version-0 keyframe's
hash with that of its own initial values, and a later init is refused by its hash.
"""
from __future__ import annotations

import contextlib
import hashlib
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from yeto.schemas import codecs, subjects
from yeto.schemas.buffers import BufferPool, joined
from yeto.schemas.codecs.base import spread

NATS_HEADER = "Yeto-Fragment"
FragmentKind = Literal["init", "push", "keyframe", "delta"]
PayloadDigest = Literal["payload", "chunks"]
CHUNK_DIGESTED: frozenset[str] = frozenset({"push", "delta"})
"""The kinds `split_chunks` names by their chunks' digests; inits and keyframes keep the payload's own hash."""
FragmentRole = Literal["layers", "embed", "misc"]
DEFAULT_MAX_BYTES = 1 << 34        # 16 GiB: no fragment payload is larger; the syncer passes a tighter cap
PUSH_PAYLOADS = BufferPool()
"""Where a push is joined from its chunks, one pool per process (schemas/buffers.py): a push's payload is dropped once
it is decoded, so a round's pushes reuse one buffer instead of faulting a fresh one's pages in every time."""


class FragmentError(ValueError):
    """A chunk or header that can never be accepted; `reason` is a LearnerRejected reason code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class FragmentHeader(BaseModel):
    """Everything a receiver needs to validate, route and decode one chunk of a fragment message."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    learner: str = ""              # the sender; "" for broadcasts from the syncer
    generation: int = Field(0, ge=0)       # incremented each time a learner id is (re)started
    fragment: int = Field(ge=0)
    kind: FragmentKind = "push"
    role: FragmentRole = "layers"  # embed fragments are merged by plain weighted average
    base_version: int = Field(0, ge=0)     # push: the global version its anchor came from; delta: version - 1
    version: int = Field(0, ge=0)          # keyframe/delta: the global version it carries
    local_step: int = Field(0, ge=0)
    c_steps: int = Field(0, ge=0)
    c_tokens: int = Field(0, ge=0)
    tokens_to: int = Field(0, ge=0)        # push: the learner generation's trained tokens so far (0 = not sent); the push
                                           # covers (tokens_to - c_tokens, tokens_to], so overlapping pushes are credited once
    step_time_s: float = Field(0.0, ge=0)  # the sender's EMA inner-step time (0 = unknown)
    fingerprint: str = ""
    codec: codecs.CodecName = codecs.Q4.name
    numel: int = Field(ge=0)
    sha256: str = ""               # of the whole encoded payload, as `digest` says (the module's docstring)
    digest: PayloadDigest = "payload"      # "chunks": sha256 is that of the chunks' digests and the length
    chunk: int = Field(0, ge=0)
    num_chunks: int = Field(1, ge=1)
    chunk_bytes: int = Field(subjects.CHUNK_BYTES, ge=1)
    chunk_sha256: str = ""

    @property
    def message_key(self) -> tuple[object, ...]:
        """Identifies the whole message (all its chunks share it)."""
        return (self.run_id, self.learner, self.generation, self.fragment, self.kind, self.local_step, self.version, self.sha256)

    def to_nats(self) -> dict[str, str]:
        return {NATS_HEADER: self.model_dump_json()}

    @classmethod
    def from_nats(cls, headers: dict[str, str] | None) -> FragmentHeader:
        raw = (headers or {}).get(NATS_HEADER)
        if raw is None:
            raise FragmentError("bad_header", f"the message has no {NATS_HEADER} header")
        try:
            return cls.model_validate_json(raw)
        except ValidationError as e:
            first = e.errors()[0]
            raise FragmentError("bad_header", f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def sha256(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


# SHA-256 digests of chunks hashed ahead on the kernel threads (`prehashed`), by the chunk object's id; each entry holds
# its chunk, so no id is reused while it is here, and only immutable `bytes` are taken (their digest cannot go stale).
_PREHASHED: dict[int, tuple[bytes, str]] = {}


@contextlib.contextmanager
def prehashed(chunks: Sequence[bytes | bytearray | memoryview]) -> Iterator[None]:
    """Within it, a chunk of `chunks` checked by an assembler (`_validate`) finds its SHA-256 computed already, all of
    them hashed on the kernel threads at once (codecs/base.py `spread`; hashlib releases the GIL) instead of one after
    another on the intake's thread as each comes in (issue 40: at 64M values the pushes' chunk hashes were ~15% of a
    round, on one thread whatever the head's cores). The syncer's data plane wraps each fetched batch in it. The
    checks and verdicts are the same: the digest is of the same immutable bytes, compared where it was computed."""
    held = [c for c in chunks if type(c) is bytes and id(c) not in _PREHASHED]
    for chunk, digest in zip(held, spread(sha256, held), strict=True):
        _PREHASHED[id(chunk)] = (chunk, digest)
    try:
        yield
    finally:
        for chunk in held:
            _PREHASHED.pop(id(chunk), None)


def _digest(chunk: bytes | bytearray | memoryview) -> str:
    known = _PREHASHED.get(id(chunk))
    return known[1] if known is not None and known[0] is chunk else sha256(chunk)


def chunks_digest(chunk_digests: list[str], total: int) -> str:
    """The "chunks" digest of a payload of `total` bytes whose chunks' SHA-256 hex digests are `chunk_digests`, in order."""
    digest = hashlib.sha256()
    for chunk_digest in chunk_digests:
        digest.update(bytes.fromhex(chunk_digest))
    digest.update(total.to_bytes(8, "little"))
    return digest.hexdigest()


def split_chunks(header: FragmentHeader, payload: bytes | memoryview, chunk_bytes: int = subjects.CHUNK_BYTES,
                 digest: PayloadDigest | None = None) -> list[tuple[FragmentHeader, bytes]]:
    """Split one encoded payload into checksummed chunks, each with its own header. `digest`: how the header names the
    payload (default: "chunks" for the kinds in CHUNK_DIGESTED, "payload" for the others)."""
    assert len(payload) == codecs.codec(header.codec).encoded_size(header.numel), "payload does not match codec and numel"
    digest = digest or ("chunks" if header.kind in CHUNK_DIGESTED else "payload")
    num_chunks = max(1, -(-len(payload) // chunk_bytes))
    view = memoryview(payload)
    pieces = [bytes(view[i * chunk_bytes:(i + 1) * chunk_bytes]) for i in range(num_chunks)]
    return chunked(header, pieces, [sha256(piece) for piece in pieces], chunk_bytes, digest,
                   None if digest == "chunks" else sha256(payload))


def chunked(header: FragmentHeader, pieces: list[bytes], digests: list[str], chunk_bytes: int, digest: PayloadDigest,
            whole: str | None) -> list[tuple[FragmentHeader, bytes]]:
    """The chunks' headers, from their digests: `whole` is the payload's SHA-256 for digest "payload" (unused for
    "chunks": derived from `digests`)."""
    named = chunks_digest(digests, sum(len(p) for p in pieces)) if digest == "chunks" else whole
    return [(header.model_copy(update=dict(sha256=named, digest=digest, chunk=i, num_chunks=len(pieces),
                                           chunk_bytes=chunk_bytes, chunk_sha256=chunk_digest)), piece)
            for i, (piece, chunk_digest) in enumerate(zip(pieces, digests, strict=True))]


class ChunkAssembler:
    """Reassembles chunked messages; validates every chunk before keeping anything. A partial message holds
    only the chunks received (never a buffer of its declared size), and pending bytes are capped in total
    and per sender: the oldest partial messages are evicted first (`evicted` lists their headers)."""

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_chunk_bytes: int = subjects.MAX_PAYLOAD,
                 max_pending: int = 64, max_pending_bytes: int = DEFAULT_MAX_BYTES, max_sender_bytes: int | None = None) -> None:
        self.max_bytes, self.max_chunk_bytes, self.max_pending = max_bytes, max_chunk_bytes, max_pending
        self.max_pending_bytes, self.max_sender_bytes = max_pending_bytes, max_sender_bytes or max_pending_bytes
        self.pending: OrderedDict[tuple[object, ...], tuple[FragmentHeader, dict[int, bytes]]] = OrderedDict()
        self.digests: dict[tuple[object, ...], dict[int, str]] = {}     # each kept chunk's checked SHA-256
        self.pending_bytes = 0
        self.evicted: deque[FragmentHeader] = deque(maxlen=1024)   # first headers of evicted partials; the caller drains it

    def add(self, header: FragmentHeader, chunk: bytes) -> bytes | memoryview | None:
        """Add one chunk; return the whole payload once every chunk is in, else None. Raises FragmentError."""
        total = self._validate(header, chunk)
        if header.num_chunks == 1:
            return _checked(header, bytes(chunk), total)
        key = header.message_key
        entry = self.pending.get(key)
        if entry is not None and ((entry[0].numel, entry[0].codec, entry[0].num_chunks, entry[0].chunk_bytes, entry[0].digest)
                                  != (header.numel, header.codec, header.num_chunks, header.chunk_bytes, header.digest)):
            raise FragmentError("corrupt_chunk", f"chunk {header.chunk} disagrees with chunk sizes announced by its message")
        if entry is not None and header.chunk in entry[1]:
            return None                                 # a redelivered chunk is idempotent
        if total > self.max_sender_bytes:
            raise FragmentError("too_large", f"a message of {total} bytes exceeds the {self.max_sender_bytes}-byte cap "
                                             "per sender")
        self._make_room(header, len(chunk), keep=key)
        if key not in self.pending:
            self.pending[key] = (header, {})
        _, chunks = self.pending[key]
        chunks[header.chunk] = bytes(chunk)
        digests = self.digests.setdefault(key, {})
        digests[header.chunk] = header.chunk_sha256          # checked against the chunk's bytes by _validate
        self.pending_bytes += len(chunk)
        if len(chunks) < header.num_chunks:
            return None
        self._drop(key)
        parts = [chunks[i] for i in range(header.num_chunks)]
        if header.digest == "chunks":                     # derived from the chunks' checked digests: no second hash
            if chunks_digest([digests[i] for i in range(header.num_chunks)], total) != header.sha256:
                raise FragmentError("corrupt_chunk", "the chunks' digests do not give the message's digest")
            return join(header, parts)
        return self.whole(header, parts)

    def whole(self, header: FragmentHeader, parts: list[bytes]) -> bytes | memoryview:
        """The payload of a message whose chunks are all in, its SHA-256 checked (a subclass may hash as they come)."""
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        if digest.hexdigest() != header.sha256:
            raise FragmentError("corrupt_chunk", "the reassembled payload fails its SHA-256 checksum")
        return join(header, parts)

    def sender_bytes(self, learner: str) -> int:
        return sum(len(c) for h, chunks in self.pending.values() if h.learner == learner for c in chunks.values())

    def _make_room(self, h: FragmentHeader, size: int, keep: tuple[object, ...]) -> None:
        """Evict the oldest partial messages (the sender's own first, over its cap) until `size` more bytes fit."""
        while self.sender_bytes(h.learner) + size > self.max_sender_bytes:
            self._evict(next(k for k, (first, _) in self.pending.items() if first.learner == h.learner))
        while self.pending and (self.pending_bytes + size > self.max_pending_bytes
                                or (keep not in self.pending and len(self.pending) >= self.max_pending)):
            self._evict(next(iter(self.pending)))

    def _evict(self, key: tuple[object, ...]) -> None:
        self.evicted.append(self.pending[key][0])
        self._drop(key)

    def _drop(self, key: tuple[object, ...]) -> None:
        _, chunks = self.pending.pop(key)
        self.digests.pop(key, None)
        self.pending_bytes -= sum(len(c) for c in chunks.values())

    def _validate(self, h: FragmentHeader, chunk: bytes) -> int:
        total = codecs.codec(h.codec).encoded_size(h.numel)
        if total > self.max_bytes:
            raise FragmentError("too_large",
                                f"{h.numel} values in {h.codec} are {total} bytes, above the cap of {self.max_bytes}")
        if h.chunk_bytes > self.max_chunk_bytes:
            raise FragmentError("too_large", f"chunk size {h.chunk_bytes} exceeds the {self.max_chunk_bytes}-byte maximum")
        if h.num_chunks != max(1, -(-total // h.chunk_bytes)) or h.chunk >= h.num_chunks:
            raise FragmentError("corrupt_chunk", f"chunk {h.chunk} of {h.num_chunks} is inconsistent with {total} bytes "
                                                  f"in chunks of {h.chunk_bytes}")
        expected = min(h.chunk_bytes, total - h.chunk * h.chunk_bytes)
        if len(chunk) != expected:
            raise FragmentError("corrupt_chunk", f"chunk {h.chunk} has {len(chunk)} bytes, expected {expected}")
        if _digest(chunk) != h.chunk_sha256:
            raise FragmentError("corrupt_chunk", f"chunk {h.chunk} fails its SHA-256 checksum")
        return total


def join(header: FragmentHeader, parts: list[bytes]) -> bytes | memoryview:
    """The checked parts of a whole message, joined: a push into a buffer of PUSH_PAYLOADS (a read-only memoryview that
    holds it until dropped), anything else (an init, a broadcast a learner takes in: once per run or per version)
    into fresh bytes; a push's parts copied on the kernel threads (codecs/base.py `spread`). Called only once every
    chunk passed its size and hash checks and the whole its SHA-256, so a refused message never writes into a pooled
    buffer."""
    return joined(parts, PUSH_PAYLOADS, spread) if header.kind == "push" else b"".join(parts)


def _checked(header: FragmentHeader, payload: bytes, total: int) -> bytes:
    """A one-chunk message's payload, its chunk already checked: by its named digest."""
    named = chunks_digest([header.chunk_sha256], total) if header.digest == "chunks" else sha256(payload)
    if named != header.sha256:
        raise FragmentError("corrupt_chunk", "the reassembled payload fails its SHA-256 checksum")
    return payload


def apply_global(shadow: np.ndarray | None, header: FragmentHeader, payload: bytes) -> np.ndarray:
    """The shadow after one keyframe or delta: exactly the arithmetic learners and syncer both run."""
    if header.kind == "keyframe":
        return codecs.codec(header.codec).decode(payload, header.numel)
    assert header.kind == "delta" and shadow is not None, "a delta applies on top of the previous version"
    shadow += codecs.codec(header.codec).decode(payload, header.numel)
    return shadow
