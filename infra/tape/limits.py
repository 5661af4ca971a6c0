"""What the tape writer keeps of a flood: one event's bytes capped, each learner's event rate capped, batches in bytes.

A learner's credential may publish on its own event subjects as fast and as big as the server lets it. The tape stores
every sequence (it stays the stream's exact mirror), but an event over `max_event_bytes`, or one of a learner's
subjects over its rate, is stored as a stub (`{"dropped_bytes": n}`) with `forged` saying why: the file and DuckDB's
memory grow with what a learner may send, not with what it tries. The rate is a token bucket per learner subject
(`yeto.evt.<run>.<Type>.<learner>`) on the stream's own timestamps, so a replay decides alike. docs/TAPE.md.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field


def learner_subject(subject: str) -> bool:
    """A learner's own event subject: yeto.evt.<run>.<Type>.<learner> (services publish on four tokens)."""
    return subject.startswith("yeto.evt.") and subject.count(".") == 4


@dataclass
class Limits:
    max_event_bytes: int
    events_per_s: float
    burst: int
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)   # subject -> (tokens, at)

    def stub(self, subject: str, size: int, at: float) -> tuple[str, str] | None:
        """None to store the event as published, else (the stub payload, why) to store in its place."""
        why = None
        if size > self.max_event_bytes:
            why = f"{size} bytes, over the tape's cap of {self.max_event_bytes} for one event: not stored"
        elif learner_subject(subject) and not self._take(subject, at):
            why = f"rate limited: over {self.events_per_s:g} events/s (burst {self.burst}) on this learner's subject"
        return None if why is None else (json.dumps({"dropped_bytes": size}), why)

    def _take(self, subject: str, at: float) -> bool:
        tokens, then = self.buckets.get(subject, (float(self.burst), at))
        tokens = min(float(self.burst), tokens + max(0.0, at - then) * self.events_per_s)
        self.buckets[subject] = (tokens - 1.0, at) if tokens >= 1.0 else (tokens, at)
        return tokens >= 1.0
