"""The syncer's assembler hashes a payload as its chunks arrive (services/syncer/intake.py HashingAssembler): the
same payloads and the same refusals as the ChunkAssembler, in order, out of order, redelivered or evicted. A message
named by its chunks' digests (schemas/fragments.py digest "chunks") is checked without hashing its payload again, and
refused as surely: a wrong digest, a chunk of another message under its key, a one-chunk message."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.codecs import base
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, chunks_digest, sha256, split_chunks
from yeto.services.syncer.intake import HashingAssembler

N = 40_000
_SHA256 = hashlib.sha256


def _chunks(seed: int, wrong_whole: bool = False, digest: str | None = None) -> list[tuple[FragmentHeader, bytes]]:
    payload = codecs.F32.encode(np.random.default_rng(seed).standard_normal(N, dtype=np.float32))
    h = FragmentHeader(run_id="r", learner="l0", fragment=0, kind="push", fingerprint="f" * 64, codec="f32", numel=N,
                       c_tokens=10, c_steps=1, local_step=seed, base_version=0, sha256="0" * 64)
    out = split_chunks(h, payload, 16_384, digest=digest)
    if wrong_whole:                      # every chunk intact, the whole payload's declared hash another's
        out = [(c.model_copy(update={"sha256": "ab" * 32}), b) for c, b in out]
    return out


def _feed(assembler: ChunkAssembler, chunks) -> list:
    got = []
    for h, c in chunks:
        try:
            got.append(assembler.add(h, c))
        except FragmentError as e:
            got.append(e.reason)
    return got


@pytest.mark.parametrize("digest", ["payload", "chunks"])
@pytest.mark.parametrize("order", ["in order", "reversed", "shuffled with redeliveries"])
def test_running_hash_gives_the_assemblers_payloads_and_refusals(order, digest):
    chunks = _chunks(1, digest=digest) + _chunks(2, wrong_whole=True, digest=digest) + _chunks(3, digest=digest)
    if order == "reversed":
        chunks = chunks[::-1]
    elif order != "in order":
        rng = np.random.default_rng(7)
        chunks = [chunks[i] for i in rng.permutation(len(chunks))] + chunks[:3]
    base.use_kernels("compiled")
    got, want = _feed(HashingAssembler(), chunks), _feed(ChunkAssembler(), chunks)
    assert got == want
    assert "corrupt_chunk" in got and sum(isinstance(p, bytes | memoryview) for p in got) == 2   # a push: pooled


def test_an_evicted_message_leaves_no_running_hash_and_arrives_whole_later():
    assembler = HashingAssembler()
    first = _chunks(4)
    _feed(assembler, first[:2])
    assembler._evict(first[0][0].message_key)                 # as _make_room does over a cap
    assert assembler._running == {} and assembler.evicted
    assert _feed(assembler, first)[-1] == b"".join(c for _, c in first)   # sent again: whole, hashed as it came
    assert assembler._running == {} and assembler._dropped is None


def test_a_push_is_named_by_its_chunks_digests_and_joined_without_a_second_hash(monkeypatch):
    chunks = _chunks(5)                                                   # split_chunks' default for a push
    payload = b"".join(c for _, c in chunks)
    assert all(h.digest == "chunks" for h, _ in chunks)
    assert chunks[0][0].sha256 == chunks_digest([sha256(c) for _, c in chunks], len(payload)) != sha256(payload)
    hashed: list[int] = []

    class Counted:
        """hashlib.sha256, counting the bytes it is given."""

        def __init__(self, data: bytes = b"") -> None:
            self.inner = _SHA256(data)
            hashed.append(len(data))

        def update(self, data) -> None:
            hashed.append(len(data))
            self.inner.update(data)

        def hexdigest(self) -> str:
            return self.inner.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", Counted)
    base.use_kernels("compiled")
    for assembler in (ChunkAssembler(), HashingAssembler()):
        hashed.clear()
        assert bytes(_feed(assembler, chunks)[-1]) == payload
        assert sum(hashed) == len(payload) + 32 * len(chunks) + 8          # each byte once (its chunk's check), then
        assert getattr(assembler, "_running", {}) == {}                     # the digests and the length
    as_before = _chunks(5, digest="payload")
    hashed.clear()
    assert bytes(_feed(ChunkAssembler(), as_before)[-1]) == payload and sum(hashed) == 2 * len(payload)


@pytest.mark.parametrize("kind", [ChunkAssembler, HashingAssembler])
def test_a_chunks_digest_binds_every_chunk_to_its_message(kind):
    one, other = _chunks(6), _chunks(7)
    swapped = [one[0], (one[1][0].model_copy(update={"chunk_sha256": other[1][0].chunk_sha256}), other[1][1]), *one[2:]]
    declared = [(h.model_copy(update={"sha256": other[0][0].sha256}), c) for h, c in one]      # another's digest
    mixed = [one[0], (one[1][0].model_copy(update={"digest": "payload"}), one[1][1]), *one[2:]]
    for chunks in (swapped, declared, mixed):
        assert "corrupt_chunk" in _feed(kind(), chunks)
    assert _feed(kind(), one)[-1] == b"".join(c for _, c in one)


def test_a_one_chunk_message_is_checked_by_its_named_digest():
    payload = codecs.F32.encode(np.arange(100, dtype=np.float32))
    h = FragmentHeader(run_id="r", learner="l0", fragment=0, kind="push", fingerprint="f" * 64, codec="f32", numel=100,
                       c_tokens=10, c_steps=1, local_step=1, base_version=0)
    for digest in ("payload", "chunks"):
        ((chunk_header, chunk),) = split_chunks(h, payload, digest=digest)
        assert ChunkAssembler().add(chunk_header, chunk) == payload
        wrong = chunk_header.model_copy(update={"digest": "payload" if digest == "chunks" else "chunks"})
        with pytest.raises(FragmentError, match="corrupt_chunk"):
            ChunkAssembler().add(wrong, chunk)
