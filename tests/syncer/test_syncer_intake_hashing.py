"""The syncer's assembler hashes a payload as its chunks arrive (services/syncer/intake.py HashingAssembler): the
same payloads and the same refusals as the ChunkAssembler, in order, out of order, redelivered or evicted."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.codecs import base
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, split_chunks
from yeto.services.syncer.intake import HashingAssembler

N = 40_000


def _chunks(seed: int, wrong_whole: bool = False) -> list[tuple[FragmentHeader, bytes]]:
    payload = codecs.F32.encode(np.random.default_rng(seed).standard_normal(N, dtype=np.float32))
    h = FragmentHeader(run_id="r", learner="l0", fragment=0, kind="push", fingerprint="f" * 64, codec="f32", numel=N,
                       c_tokens=10, c_steps=1, local_step=seed, base_version=0, sha256="0" * 64)
    out = split_chunks(h, payload, 16_384)
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


@pytest.mark.parametrize("order", ["in order", "reversed", "shuffled with redeliveries"])
def test_running_hash_gives_the_assemblers_payloads_and_refusals(order):
    chunks = _chunks(1) + _chunks(2, wrong_whole=True) + _chunks(3)
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
