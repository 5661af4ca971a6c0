"""Which announced keyframes a learner needs, part of diloco_sync's state; pure (the time is passed in).

Keyframes (f32, 4 bytes a parameter) may arrive as announcements only: a header with no payload. A
fresh run's version 0 is some learner's initial values: equal to ours (same sha256), it is adopted with
no download. Any other keyframe is fetched only to join (no version of the fragment yet) or when the
learner stays behind it for `patience_s` because a delta never came, so periodic keyframes cost a learner
that follows the deltas nothing but their headers. A keyframe asked for that has not landed after
`retry_s` (its fetch gave up while the server was away) is asked for again.
"""
from __future__ import annotations

from collections.abc import Callable

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader


class KeyframeDemand:
    def __init__(self, *, patience_s: float, retry_s: float = 30.0) -> None:
        self.patience_s, self.retry_s = patience_s, retry_s
        self.announced: dict[int, tuple[FragmentHeader, float]] = {}   # fragment -> newest keyframe header, when seen
        self.requested: dict[tuple[int, int], float] = {}              # (fragment, version) asked for -> when
        self.num_adopted = 0                                           # adopted by checksum, never downloaded
        self.num_requested = 0                                         # fetches asked for, retries included

    def announce(self, header: FragmentHeader, now: float) -> None:
        seen = self.announced.get(header.fragment)
        if header.kind == "keyframe" and header.chunk == 0 and (seen is None or seen[0].version < header.version):
            self.announced[header.fragment] = (header, now)

    def adoptable(self, versions: dict[int, int | None], numel: Callable[[int], int],
                  own_sha256: Callable[[int], str]) -> set[int]:
        """Fragments with no version whose announced version 0 equals our own f32 values (counted as adopted)."""
        adopted = set()
        for p, (h, _) in self.announced.items():
            if (versions[p] is None and h.version == 0 and h.codec == codecs.F32.name and h.numel == numel(p)
                    and own_sha256(p) == h.sha256):
                self.num_adopted += 1
                adopted.add(p)
        return adopted

    def wanted(self, versions: dict[int, int | None], now: float) -> list[FragmentHeader]:
        """Announced keyframes to fetch now: no version yet, or stuck behind one; each asked for once, and again
        every `retry_s` while it has not landed."""
        out = []
        for p, (h, seen_at) in self.announced.items():
            v = versions[p]
            stuck = v is not None and v < h.version and now - seen_at >= self.patience_s
            asked = self.requested.get((p, h.version))
            if (v is None or stuck) and (asked is None or now - asked >= self.retry_s):
                self.requested[(p, h.version)] = now
                self.num_requested += 1
                out.append(h)
        return out

    def landed(self, fragment: int, version: int) -> None:
        """Version `version` of `fragment` is applied: an announcement it covers is no longer needed."""
        seen = self.announced.get(fragment)
        if seen is not None and seen[0].version <= version:
            del self.announced[fragment]
        for key in [k for k in self.requested if k[0] == fragment and k[1] <= version]:
            del self.requested[key]
