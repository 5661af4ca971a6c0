"""Fragment headers, chunking and the assembler: round trips, and typed rejections before allocation."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, split_chunks


def message(numel=5000, codec="q4"):
    x = np.random.default_rng(0).standard_normal(numel).astype(np.float32)
    payload = codecs.codec(codec).encode(x)
    header = FragmentHeader(run_id="r", learner="l0", fragment=2, local_step=24, fingerprint="f" * 64, codec=codec, numel=numel)
    return header, payload


def test_chunks_reassemble_in_any_order_with_redelivery():
    header, payload = message()
    chunks = split_chunks(header, payload, chunk_bytes=1000)
    assert len(chunks) == 3 and all(FragmentHeader.from_nats(h.to_nats()) == h for h, _ in chunks)
    asm = ChunkAssembler()
    assert asm.add(*chunks[2]) is None and asm.add(*chunks[0]) is None and asm.add(*chunks[0]) is None
    assert asm.add(*chunks[1]) == payload and not asm.pending


@pytest.mark.parametrize("corrupt, reason", [
    (lambda h, c: (h, c[:-1]), "corrupt_chunk"),
    (lambda h, c: (h, bytes([c[0] ^ 1]) + c[1:]), "corrupt_chunk"),
    (lambda h, c: (h.model_copy(update={"num_chunks": 7}), c), "corrupt_chunk"),
    (lambda h, c: (h.model_copy(update={"numel": 10**12}), c), "too_large"),
    (lambda h, c: (h.model_copy(update={"chunk_bytes": 1 << 30}), c), "too_large"),
])
def test_assembler_rejects_bad_chunks_with_a_reason(corrupt, reason):
    header, payload = message()
    h, c = corrupt(*split_chunks(header, payload, chunk_bytes=1000)[0])
    with pytest.raises(FragmentError) as err:
        ChunkAssembler(max_bytes=1 << 20).add(h, c)
    assert err.value.reason == reason


def test_whole_payload_checksum_and_bad_headers_are_rejected():
    header, payload = message(numel=10)
    (h, c), = split_chunks(header, payload)
    with pytest.raises(FragmentError, match="reassembled payload"):
        ChunkAssembler().add(h.model_copy(update={"sha256": "0" * 64}), c)
    for headers in (None, {"Yeto-Fragment": "{not json"}, {"Yeto-Fragment": '{"run_id": "r", "fragment": -1, "numel": 3}'}):
        with pytest.raises(FragmentError) as err:
            FragmentHeader.from_nats(headers)
        assert err.value.reason == "bad_header"


def test_chunks_hashed_ahead_in_a_batch_are_checked_alike_and_the_memo_empties(monkeypatch):
    """`prehashed` (the data plane's fetched batch, hashed on the kernel threads at once): an intact message assembles
    without hashing a chunk again, a flipped byte is still refused as corrupt, a mutable chunk is hashed where it is
    checked, and nothing is left memoized after the batch, an exception included."""
    from yeto.schemas import fragments
    from yeto.schemas.codecs.base import set_threads, threads

    header, payload = message(numel=40_000)
    chunks = split_chunks(header, payload, chunk_bytes=4096)
    corrupt_h, corrupt_c = chunks[1][0], bytes([chunks[1][1][0] ^ 1]) + chunks[1][1][1:]
    before = threads()
    set_threads(2)
    try:
        calls = []
        real = fragments.sha256
        monkeypatch.setattr(fragments, "sha256", lambda data: calls.append(len(data)) or real(data))
        asm = ChunkAssembler()
        with fragments.prehashed([c for _, c in chunks] + [corrupt_c]):
            hashed_ahead = len(calls)
            out = [asm.add(h, c) for h, c in chunks]
            assert len(calls) == hashed_ahead == len(chunks) + 1     # every digest from the batch's hashing
            with pytest.raises(FragmentError) as e:
                ChunkAssembler().add(corrupt_h, corrupt_c)
            assert e.value.reason == "corrupt_chunk"
            with pytest.raises(FragmentError):                       # a bytearray: hashed here, not memoized
                ChunkAssembler().add(corrupt_h, bytearray(corrupt_c))
        assert out[-1] == payload and not fragments._PREHASHED
        with pytest.raises(RuntimeError), fragments.prehashed([c for _, c in chunks]):
            raise RuntimeError("a batch that fails midway")
        assert not fragments._PREHASHED
    finally:
        set_threads(before)
