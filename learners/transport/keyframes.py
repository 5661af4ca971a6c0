"""Keyframe payloads on demand: where each announced keyframe chunk sits in its stream, and the fetch by
direct get of the chunk's subject once the learner asks for it (the subject form: a learner's credential may
name only its own run's keyframes, docs/SECURITY.md).

Learners watch keyframes headers only; each announcement carries the chunk's stream sequence. A
keyframe is fetched when the learner has asked for it and every one of its chunks is announced; an
older announced version of the fragment is forgotten when a newer one comes.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.subjects import keyframe_subject

log = logging.getLogger(__name__)
Key = tuple[int, int]                      # (fragment, version)


class DirectGet(Protocol):
    """The part of the bus (yeto.infra.bus.Bus) a fetch uses."""

    async def direct_last(self, subject: str, *, timeout_s: float = ...) -> tuple[int, dict[str, str], bytes] | None: ...


class KeyframeIndex:
    """Announced keyframes and the ones asked for. Pure; every call returns what is ready to fetch."""

    def __init__(self) -> None:
        self.announced: dict[Key, tuple[int, dict[int, int]]] = {}   # key -> (num_chunks, {chunk: stream seq})
        self.wanted: set[Key] = set()                                 # asked for, not fetched yet

    def announce(self, header: FragmentHeader, seq: int) -> dict[int, int] | None:
        key = (header.fragment, header.version)
        for old in [k for k in self.announced if k[0] == key[0] and k[1] < key[1]]:
            del self.announced[old]
        self.announced.setdefault(key, (header.num_chunks, {}))[1][header.chunk] = seq
        return self._ready(key)

    def want(self, key: Key) -> dict[int, int] | None:
        self.wanted.add(key)
        return self._ready(key)

    def _ready(self, key: Key) -> dict[int, int] | None:
        num_chunks, seqs = self.announced.get(key, (None, {}))
        if key not in self.wanted or len(seqs) != num_chunks:
            return None
        self.wanted.discard(key)
        return dict(seqs)


async def fetch(bus: DirectGet, run_id: str, fragment: int, seqs: dict[int, int],
                deliver: Callable[[dict[str, str], bytes], None], *, tries: int = 6) -> None:
    """Get every chunk of `fragment`'s keyframe, the one stored at the announced stream sequence, from `bus`
    and hand it to `deliver`, in chunk order. A server restart or a slow link: back off and retry; after `tries`,
    give up until the next keyframe is announced (and asked for). A chunk whose subject now holds another sequence
    (the stream keeps one per subject) was replaced by a newer keyframe, which is announced in turn."""
    for chunk, seq in sorted(seqs.items()):
        subject = keyframe_subject(run_id, fragment, chunk)
        for attempt in range(tries):
            try:
                got = await bus.direct_last(subject)
                break
            except Exception as e:       # noqa: BLE001 -- timeouts and connection errors alike
                log.info("keyframe chunk %d (%s #%d) not fetched (try %d): %s", chunk, subject, seq, attempt + 1, e)
                await asyncio.sleep(min(0.5 * 2 ** attempt, 8.0))
        else:
            return
        if got is None or got[0] != seq:
            return
        deliver(got[1], got[2])
