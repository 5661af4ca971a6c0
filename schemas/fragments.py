"""The fragment wire format: the header every push, keyframe and delta chunk carries, chunking and reassembly.

A message is one encoded fragment payload split into chunks of at most `chunk_bytes`. Each chunk travels
as one NATS message whose `Yeto-Fragment` header holds the FragmentHeader as compact JSON (docs/PROTOCOL.md).
The assembler validates sizes and checksums before it allocates anything; a violation raises
FragmentError with a reason code the syncer records in a LearnerRejected event.

    FragmentError(ValueError)   reason: bad_header | too_large | corrupt_chunk
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from yeto.schemas import codecs, subjects

NATS_HEADER = "Yeto-Fragment"
FragmentKind = Literal["init", "push", "keyframe", "delta"]
FragmentRole = Literal["layers", "embed", "misc"]
DEFAULT_MAX_BYTES = 1 << 34        # 16 GiB: no fragment payload is larger; the syncer passes a tighter cap


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
    codec: Literal["f32", "bf16", "q4"] = "q4"
    numel: int = Field(ge=0)
    sha256: str = ""               # of the whole encoded payload
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


def split_chunks(header: FragmentHeader, payload: bytes,
                 chunk_bytes: int = subjects.CHUNK_BYTES) -> list[tuple[FragmentHeader, bytes]]:
    """Split one encoded payload into checksummed chunks, each with its own header."""
    assert len(payload) == codecs.encoded_size(header.codec, header.numel), "payload does not match codec and numel"
    whole = sha256(payload)
    num_chunks = max(1, -(-len(payload) // chunk_bytes))
    view = memoryview(payload)
    out = []
    for i in range(num_chunks):
        piece = bytes(view[i * chunk_bytes:(i + 1) * chunk_bytes])
        out.append((header.model_copy(update=dict(sha256=whole, chunk=i, num_chunks=num_chunks, chunk_bytes=chunk_bytes,
                                                  chunk_sha256=sha256(piece))), piece))
    return out


class ChunkAssembler:
    """Reassembles chunked messages; validates every chunk before allocating or copying anything."""

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_chunk_bytes: int = subjects.MAX_PAYLOAD,
                 max_pending: int = 64) -> None:
        self.max_bytes, self.max_chunk_bytes, self.max_pending = max_bytes, max_chunk_bytes, max_pending
        self.pending: OrderedDict[tuple[object, ...], tuple[FragmentHeader, bytearray, set[int]]] = OrderedDict()

    def add(self, header: FragmentHeader, chunk: bytes) -> bytes | None:
        """Add one chunk; return the whole payload once every chunk is in, else None. Raises FragmentError."""
        total = self._validate(header, chunk)
        if header.num_chunks == 1:
            return _checked(header, bytes(chunk))
        key = header.message_key
        entry = self.pending.get(key)
        if entry is None:
            if len(self.pending) >= self.max_pending:   # abandoned partial messages (a dead sender) go first
                self.pending.popitem(last=False)
            entry = self.pending[key] = (header, bytearray(total), set())
        first, buf, seen = entry
        if ((first.numel, first.codec, first.num_chunks, first.chunk_bytes)
                != (header.numel, header.codec, header.num_chunks, header.chunk_bytes)):
            raise FragmentError("corrupt_chunk", f"chunk {header.chunk} disagrees with chunk sizes announced by its message")
        start = header.chunk * header.chunk_bytes
        buf[start:start + len(chunk)] = chunk
        seen.add(header.chunk)                          # a redelivered chunk is idempotent
        if len(seen) < header.num_chunks:
            return None
        del self.pending[key]
        return _checked(header, bytes(buf))

    def _validate(self, h: FragmentHeader, chunk: bytes) -> int:
        total = codecs.encoded_size(h.codec, h.numel)
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
        if sha256(chunk) != h.chunk_sha256:
            raise FragmentError("corrupt_chunk", f"chunk {h.chunk} fails its SHA-256 checksum")
        return total


def _checked(header: FragmentHeader, payload: bytes) -> bytes:
    if sha256(payload) != header.sha256:
        raise FragmentError("corrupt_chunk", "the reassembled payload fails its SHA-256 checksum")
    return payload


def apply_global(shadow: np.ndarray | None, header: FragmentHeader, payload: bytes) -> np.ndarray:
    """The shadow after one keyframe or delta: exactly the arithmetic learners and syncer both run."""
    if header.kind == "keyframe":
        return codecs.decode(header.codec, payload, header.numel)
    assert header.kind == "delta" and shadow is not None, "a delta applies on top of the previous version"
    shadow += codecs.decode(header.codec, payload, header.numel)
    return shadow
