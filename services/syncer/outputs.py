"""What SyncerCore returns, and the one routing of it to wherever it goes (a Sink: the bus, or a test's wire).

    outputs = core.receive(header, chunk, now)
    perform(outputs, sink)                 # a Sink of plain methods (tests, benchmarks)
    await perform_async(outputs, sink)     # a Sink whose methods are coroutines (services/syncer/bus_sink.py)

Outputs come in the order they must take effect, and are performed in that order. A round's snapshot comes
after its Broadcast and is written in the background (`background`: the sink's `snapshot_later`), off the
round's critical path: the round's pushes are acknowledged only once it is durable (dataplane.py), and a
successor that restores an older snapshot leaps past every version that went out (core.restore), so no
version number is ever given to two different values. Version 0 and a seeded run's versions are saved before
their broadcast (`snapshot`): without them a successor would have nothing to leap from.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from yeto.schemas.base import Event
from yeto.schemas.codecs.base import fused, spread
from yeto.schemas.fragments import CHUNK_DIGESTED, FragmentHeader, PayloadDigest, chunked, sha256, split_chunks
from yeto.services.syncer.rounds import WakeAt
from yeto.services.syncer.snapshot import CopiedSnapshot, FragmentSnapshot


@dataclass(frozen=True)
class Broadcast:
    """A global version of a fragment (a delta or an f32 keyframe) for every learner, to chunk and send."""

    header: FragmentHeader
    payload: bytes
    then: Callable[[], None] | None = field(default=None, compare=False, repr=False)   # called once its chunks are out


@dataclass(frozen=True)
class SaveSnapshot:
    """Write this fragment snapshot durably: before performing the outputs that follow it, or in the background."""

    snapshot: FragmentSnapshot
    background: bool = False


Output = Event | Broadcast | SaveSnapshot | WakeAt


class Sink(Protocol):
    """Where outputs go. Methods may return None or an awaitable (then use perform_async)."""

    chunk_bytes: int                                           # how Broadcast payloads are split

    def event(self, event: Event) -> Any: ...
    def chunk(self, header: FragmentHeader, chunk: bytes) -> Any: ...   # one chunk of a Broadcast, in order
    def snapshot(self, snap: FragmentSnapshot) -> Any: ...              # durable when the call returns
    def snapshot_later(self, snap: FragmentSnapshot) -> Any: ...        # started; durable later, in version order
    def wake(self, at: float) -> Any: ...                     # call core.tick(at) then (a round's grace deadline)


def calls(outputs: Iterable[Output], sink: Sink) -> Iterator[Any]:
    """Each output as the sink's calls, made one at a time as the iterator advances."""
    for out in outputs:
        if isinstance(out, SaveSnapshot):
            if isinstance(out.snapshot, CopiedSnapshot):    # its copy begins now: after the broadcast's chunks
                out.snapshot.copy.start()
            yield (sink.snapshot_later if out.background else sink.snapshot)(out.snapshot)
        elif isinstance(out, Broadcast):
            for header, chunk in broadcast_chunks(out.header, out.payload, sink.chunk_bytes):
                yield sink.chunk(header, chunk)
            if out.then is not None:        # Θ's norm of the version (core.py), off the path once the chunks are out
                out.then()
        elif isinstance(out, WakeAt):
            yield sink.wake(out.at)
        else:
            yield sink.event(out)


def broadcast_chunks(header: FragmentHeader, payload: bytes, chunk_bytes: int) -> list[tuple[FragmentHeader, bytes]]:
    """`split_chunks` of a broadcast: the same headers and chunks, but the chunks are copied out and hashed on the
    kernels' threads (base.py `spread`: hashlib releases the GIL; the threads counted when called, where a pool sized
    once by the first call's count hashed on one thread after a change from 1 to 2, as benchmarks/round.py makes), a
    delta's digest is derived from theirs (digest "chunks": its payload is hashed once) and a keyframe's SHA-256 is the
    one its header already carries (broadcast.py hashed it when it was made). Kernels "separate" and "reference" hash
    as split_chunks does, for comparison."""
    num_chunks = max(1, -(-len(payload) // chunk_bytes))
    if num_chunks == 1 or not fused():
        return split_chunks(header, payload, chunk_bytes)
    view = memoryview(payload)

    def piece(i: int) -> tuple[bytes, str]:
        copied = bytes(view[i * chunk_bytes:(i + 1) * chunk_bytes])
        return copied, sha256(copied)

    pieces, digests = zip(*spread(piece, range(num_chunks)), strict=True)
    digest: PayloadDigest = "chunks" if header.kind in CHUNK_DIGESTED else "payload"
    return chunked(header, list(pieces), list(digests), chunk_bytes, digest, header.sha256 or sha256(payload))


def perform(outputs: Iterable[Output], sink: Sink) -> None:
    for _ in calls(outputs, sink):
        pass


async def perform_async(outputs: Iterable[Output], sink: Sink) -> None:
    for call in calls(outputs, sink):
        await call                 # each effect done before the next starts: the order above is kept
