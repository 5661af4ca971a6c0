"""Admission of a reassembled push: the reasons a syncer refuses one, as a pure function of its state."""
from __future__ import annotations

from dataclasses import dataclass, field

from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.recipe import SyncConfig


@dataclass
class LearnerRecord:
    """What the syncer remembers of a learner id: its newest generation and, per fragment, its last push."""

    generation: int
    last_seen: float = 0.0
    step_time_s: float = 0.0
    last_step: dict[int, int] = field(default_factory=dict)    # fragment -> newest local_step admitted
    tokens_merged: int = 0
    credited_to: dict[int, int] = field(default_factory=dict)  # fragment -> highest `tokens_to` merged

    def credit(self, h: FragmentHeader) -> int:
        """Tokens of `h` not merged before: a push made before the learner saw its previous push's merge
        carries that progress again (its anchor is older), and must not count it twice. Pushes without
        `tokens_to` (older learners) are credited their c_tokens."""
        if not h.tokens_to or h.generation != self.generation:
            return h.c_tokens
        done = self.credited_to.get(h.fragment, 0)
        self.credited_to[h.fragment] = max(done, h.tokens_to)
        return max(0, h.tokens_to - max(done, h.tokens_to - h.c_tokens))


@dataclass(frozen=True)
class Rejection:
    reason: str                     # a schemas.training.RejectReason code
    detail: str


def admit(h: FragmentHeader, *, fingerprint: str, version: int, numel: int, record: LearnerRecord | None,
          config: SyncConfig) -> Rejection | None:
    """None if the push may join the fragment's round, else why not (docs/PROTOCOL.md, admission)."""
    if h.fingerprint != fingerprint:
        return Rejection("fingerprint", f"layout fingerprint {h.fingerprint[:12]}... differs from the run's {fingerprint[:12]}...; "
                         "start the learner with the run's model, tuning and num_fragments")
    if record is not None and h.generation < record.generation:
        return Rejection("replaced_generation", f"generation {h.generation} of {h.learner!r} was replaced by generation {record.generation}")
    if h.numel != numel:
        return Rejection("bad_header", f"fragment {h.fragment} has {numel} values, the push declares {h.numel}")
    if record is not None and h.generation == record.generation and h.local_step <= record.last_step.get(h.fragment, -1):
        return Rejection("duplicate", f"push of fragment {h.fragment} at step {h.local_step} was already taken")
    if h.base_version > version:
        return Rejection("future_base", f"base version {h.base_version} is newer than the syncer's {version} (the syncer restarted from an older snapshot)")
    if version - h.base_version > config.max_base_lag:
        return Rejection("stale_base", f"base version {h.base_version} is {version - h.base_version} versions old; max_base_lag is {config.max_base_lag}")
    return None


def note_admitted(h: FragmentHeader, record: LearnerRecord | None) -> LearnerRecord:
    """The learner's record after admitting `h` (a newer generation starts a fresh record)."""
    if record is None or h.generation > record.generation:
        record = LearnerRecord(generation=h.generation)
    record.last_step[h.fragment] = max(h.local_step, record.last_step.get(h.fragment, -1))
    return record
