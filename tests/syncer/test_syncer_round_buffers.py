"""The round's large arrays come from pools reused once nothing holds them (schemas/buffers.py): a push joined from its
chunks (schemas/fragments.py PUSH_PAYLOADS), the broadcast's q4 delta (schemas/codecs/q4.py DELTA_PAYLOADS). A buffer
someone holds is never written; a chunk sequence that is refused (too large, short, corrupt) writes into no pooled
buffer at all; and the outer step's fused passes give the bits of one row at a time."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from yeto.schemas import buffers, codecs, fragments
from yeto.schemas.buffers import BufferPool
from yeto.schemas.codecs import q4
from yeto.schemas.codecs.base import encode_delta, use_kernels
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, sha256, split_chunks
from yeto.services.syncer import broadcast, merge
from yeto.services.syncer.intake import HashingAssembler
from yeto.services.syncer.rows import FragmentRows

N = 4096                       # q4: 2112 bytes, in chunks of 512


@pytest.fixture
def pool(monkeypatch) -> BufferPool:
    """A fresh PUSH_PAYLOADS for the test (earlier tests in the worker may hold the process's buffers)."""
    fresh = BufferPool()
    monkeypatch.setattr(fragments, "PUSH_PAYLOADS", fresh)
    return fresh


def _push(learner: str, seed: int, *, numel: int = N, chunk_bytes: int = 512) -> list[tuple[FragmentHeader, bytes]]:
    payload = codecs.Q4.encode(np.random.default_rng(seed).standard_normal(numel, dtype=np.float32))
    h = FragmentHeader(run_id="r", learner=learner, fragment=0, kind="push", fingerprint="f" * 64, codec="q4",
                       numel=numel, c_tokens=10, c_steps=1, local_step=seed, sha256=sha256(payload))
    return split_chunks(h, payload, chunk_bytes)


def _assemble(assembler: ChunkAssembler, chunks) -> bytes | memoryview | None:
    out = None
    for h, c in chunks:
        out = assembler.add(h, c)
    return out


def _address(payload) -> int:
    return np.frombuffer(payload, dtype=np.uint8).ctypes.data


@pytest.mark.parametrize("kind", [ChunkAssembler, HashingAssembler])
def test_a_push_is_joined_into_a_reused_buffer_and_a_held_one_is_never_overwritten(pool, kind):
    assembler = kind()
    first_chunks = _push("a", 1)
    first = _assemble(assembler, first_chunks)
    assert isinstance(first, memoryview) and first.readonly and bytes(first) == b"".join(c for _, c in first_chunks)
    kept = bytes(first)
    second_chunks = _push("b", 2)
    second = _assemble(assembler, second_chunks)         # the first is held: another buffer
    assert _address(second) != _address(first) and len(pool.buffers) == 2
    assert bytes(first) == kept and bytes(second) == b"".join(c for _, c in second_chunks)
    where = _address(first)
    del first
    gc.collect()
    third = _assemble(assembler, _push("c", 3))
    assert _address(third) == where and len(pool.buffers) == 2     # the first one's buffer again, no third made
    assert bytes(second) == b"".join(c for _, c in second_chunks)


def test_an_init_or_a_broadcast_is_joined_into_fresh_bytes(pool):
    chunks = [(h.model_copy(update={"kind": "init"}), c) for h, c in _push("a", 1)]
    out = _assemble(ChunkAssembler(), chunks)
    assert isinstance(out, bytes) and pool.buffers == []


def _refusals(chunks) -> list[tuple[str, list[tuple[FragmentHeader, bytes]]]]:
    """Chunk sequences that an assembler capped at 4 pushes of N values per sender must refuse, with the reason."""
    whole = b"".join(c for _, c in chunks)
    short = [(h, c[:-1] if h.chunk == len(chunks) - 1 else c) for h, c in chunks]    # the last chunk one byte short
    short = [(h.model_copy(update={"chunk_sha256": sha256(c)}), c) for h, c in short]
    wrong_whole = [(h.model_copy(update={"sha256": sha256(whole + b"x")}), c) for h, c in chunks]   # every chunk right
    too_large = _push("m", 6, numel=64 * N)                                          # well formed, over the cap
    return [("corrupt_chunk", short), ("corrupt_chunk", wrong_whole), ("too_large", too_large)]


@pytest.mark.parametrize("kind", [ChunkAssembler, HashingAssembler])
def test_a_refused_chunk_sequence_writes_into_no_pooled_buffer(pool, kind):
    """Hostile input: while one push's payload is held, a push too large for the cap, one whose last chunk is short and
    one whose chunks are right but whose whole is not are each refused; the held payload keeps its bytes, and the
    free buffer of the pool is not written (every size and hash check comes before the join)."""
    assembler = kind()
    assembler.max_sender_bytes = 4 * codecs.Q4.encoded_size(N)
    held = _assemble(assembler, _push("a", 1))
    spare = _assemble(assembler, _push("b", 2))
    kept = bytes(held)
    free = np.frombuffer(spare, dtype=np.uint8).ctypes.data
    del spare
    gc.collect()
    free_buffer = next(b for b in pool.buffers if b.ctypes.data == free)
    free_buffer[:] = 0xAB                                  # a marker: any write into the free buffer shows
    for reason, seq in _refusals(_push("m", 5)):
        with pytest.raises(FragmentError) as refused:
            _assemble(assembler, seq)
        assert refused.value.reason == reason, refused.value
        assert bytes(held) == kept
        assert (free_buffer == 0xAB).all() and len(pool.buffers) == 2


def test_the_pool_keeps_at_most_its_count_of_the_largest_size():
    pool = BufferPool(keep=2)
    held = [pool.take(100) for _ in range(4)]
    assert len(pool.buffers) == 2 and len({a.ctypes.data for a in held}) == 4
    del held
    gc.collect()
    assert pool.take(50).size == 50 and len(pool.buffers) == 2          # a smaller request: a view of a free buffer
    pool.take(1000)
    assert [b.size for b in pool.buffers] == [1000]                     # a larger one: the smaller buffers go
    with pytest.raises(ValueError, match="at least one"):
        BufferPool(keep=0)


def test_only_here_sees_every_kind_of_holder():
    pool = BufferPool()
    view = pool.take(10)
    seen = [buffers.only_here(pool.buffers[0])]            # (pytest's assert rewriting would hold what it shows)
    mv = memoryview(view).toreadonly()
    del view
    seen.append(buffers.only_here(pool.buffers[0]))
    arr = np.frombuffer(mv, dtype=np.uint8)
    del mv
    seen.append(buffers.only_here(pool.buffers[0]))
    del arr
    seen.append(buffers.only_here(pool.buffers[0]))
    assert seen == [False, False, False, True]


def test_the_broadcast_delta_is_encoded_into_a_reused_buffer_and_a_held_one_keeps_its_bytes(monkeypatch):
    fresh = BufferPool()
    monkeypatch.setattr(q4, "DELTA_PAYLOADS", fresh)
    use_kernels("compiled")
    rng = np.random.default_rng(0)
    theta, shadow = rng.standard_normal(N, dtype=np.float32), np.zeros(N, dtype=np.float32)
    want = codecs.Q4.encode(theta)
    first = encode_delta(codecs.Q4, theta, shadow)
    assert isinstance(first, memoryview) and first.readonly and first == want
    second = encode_delta(codecs.Q4, theta + 1, shadow)      # the first is held (its chunks not out yet)
    assert first == want and _address(second) != _address(first)
    where = _address(first)
    del first
    gc.collect()
    third = encode_delta(codecs.Q4, theta, shadow)
    assert _address(third) == where and len(fresh.buffers) == 2


def test_a_keyframe_is_written_into_a_reused_buffer_and_a_held_one_keeps_its_bytes(monkeypatch):
    fresh = BufferPool()
    monkeypatch.setattr(broadcast, "KEYFRAME_PAYLOADS", fresh)
    shadow = broadcast.Shadow(run_id="r", fragment=0, fingerprint="f" * 64, role="layers", keyframe_every=1, codec_down="q4")
    values = np.random.default_rng(1).standard_normal(N, dtype=np.float32)
    shadow.reset(3, values)
    header, first = shadow.keyframe()
    assert isinstance(first, memoryview) and first.readonly and first == codecs.F32.encode(values)
    assert header.sha256 == sha256(codecs.F32.encode(values)) and header.kind == "keyframe" and header.codec == "f32"
    shadow.reset(4, values + 1)
    _, second = shadow.keyframe()                            # the first is held (its chunks not out yet)
    assert first == codecs.F32.encode(values) and second == codecs.F32.encode(values + 1)
    assert _address(second) != _address(first)
    where = _address(first)
    del first
    gc.collect()
    _, third = shadow.keyframe()
    assert _address(third) == where and len(fresh.buffers) == 2 and third == codecs.F32.encode(values + 1)


@pytest.mark.parametrize("num", [1, 2, 3, 4, 5, 7])
def test_the_fused_step_gives_the_bits_of_one_row_at_a_time(num):
    """The step adds theta, b and the pushes two at a time (merge.py `_four_rows`, `_add_two_rows`): the same float64
    additions in the same order as one row at a time, so the same f32 bits as that sum done here in NumPy."""
    n = 3 * merge.STEP_PIECE * merge.STEP_GROUP + 77
    rng = np.random.default_rng(num)
    rows = FragmentRows(rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32) * 1e-2)
    for k in range(num):
        rows.push(k)[:] = rng.standard_normal(n, dtype=np.float32) * 1e-3
    c = rng.standard_normal((2, 2 + num))
    data = rows.rows[:2 + num].astype(np.float64)
    want = [c[i, 0] * data[0] + c[i, 1] * data[1] for i in (0, 1)]
    for m in range(2, 2 + num):
        want = [want[i] + c[i, m] * data[m] for i in (0, 1)]
    use_kernels("compiled")
    assert merge._apply(rows, c, merge.CHUNK, commit=True)
    assert rows.rows[0].tobytes() == want[0].astype(np.float32).tobytes()
    assert rows.rows[1].tobytes() == want[1].astype(np.float32).tobytes()
