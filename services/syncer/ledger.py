"""The learner ledger: each learner id's newest generation, last admitted push per fragment, and goodput credit."""
from __future__ import annotations

from dataclasses import dataclass, field

from yeto.schemas.fragments import FragmentHeader


@dataclass
class LearnerRecord:
    """What the syncer remembers of a learner id: its newest generation and, per fragment, its last push."""

    generation: int
    last_seen: float = 0.0
    step_time_s: float = 0.0
    last_step: dict[int, int] = field(default_factory=dict)    # fragment -> newest local_step admitted
    last_base: dict[int, int] = field(default_factory=dict)    # fragment -> base_version of that push (the syncer's own)
    tokens_merged: int = 0
    credited_to: dict[int, int] = field(default_factory=dict)  # fragment -> highest `tokens_to` merged

    def already(self, h: FragmentHeader) -> bool:
        """Whether a push like `h` was taken: its (base_version, local_step) is not after the last admitted one's.
        The base version is the syncer's own (admission keeps it within max_base_lag of the current version), so a
        forged push at step 10^7 blocks this learner's genuine pushes only until the fragment's next version, not
        for good. A ledger from a snapshot without bases compares steps alone."""
        step = self.last_step.get(h.fragment, -1)
        base = self.last_base.get(h.fragment)
        return h.local_step <= step if base is None else (h.base_version, h.local_step) <= (base, step)

    def credit(self, h: FragmentHeader) -> int:
        """Tokens of `h` not merged before: a learner's push covers (tokens_to - c_tokens, tokens_to], and a
        learner that repeats progress a merged push carried (an older learner's pushes from one anchor) must not be
        credited it twice. Pushes without
        `tokens_to` (older learners) are credited their c_tokens."""
        if not h.tokens_to or h.generation != self.generation:
            return h.c_tokens
        done = self.credited_to.get(h.fragment, 0)
        self.credited_to[h.fragment] = max(done, h.tokens_to)
        return max(0, h.tokens_to - max(done, h.tokens_to - h.c_tokens))


class Ledger(dict[str, LearnerRecord]):
    """Every learner id this syncer has heard from (the part of SyncerCore that spans fragments)."""

    def note(self, h: FragmentHeader, now: float, *, admitted: bool) -> bool:
        """Record that admission took `h` (an admitted push also advances its fragment's last (base, step)): the
        learner's heartbeat, which liveness.py reads as `last_seen`. True if the learner id or its generation is new."""
        old = self.get(h.learner)
        fresh = old is None or h.generation > old.generation
        record = self[h.learner] = LearnerRecord(generation=h.generation) if old is None or fresh else old
        if admitted and not record.already(h):
            record.last_step[h.fragment], record.last_base[h.fragment] = h.local_step, h.base_version
        record.last_seen = now
        record.step_time_s = h.step_time_s or record.step_time_s
        return fresh

    def slowest_step_s(self, live: set[str]) -> float:
        return max((self[name].step_time_s for name in live if name in self), default=0.0)   # one still joining: unknown

    def credit(self, headers: list[FragmentHeader]) -> list[int]:
        """Goodput of a merged round's pushes: each token counted once (LearnerRecord.credit)."""
        credits = [self[h.learner].credit(h) for h in headers]
        for h, credit in zip(headers, credits):
            self[h.learner].tokens_merged += credit
        return credits

    def entries(self, fragment: int) -> dict[str, dict[str, int]]:
        """The snapshot's ledger of one fragment: what resume needs to refuse replays and not credit twice."""
        return {name: {"generation": rec.generation, "last_step": rec.last_step.get(fragment, -1),
                       "last_base": rec.last_base.get(fragment, -1), "credited_to": rec.credited_to.get(fragment, 0)}
                for name, rec in self.items()}

    def restore(self, fragment: int, entries: dict[str, dict[str, int]], now: float) -> None:
        """Merge a snapshot's ledger in; its learners count as live (last seen `now`) until they time out."""
        for name, entry in entries.items():
            rec = self.get(name)
            if rec is None or entry["generation"] > rec.generation:
                rec = self[name] = LearnerRecord(generation=entry["generation"], last_seen=now)
            if entry["generation"] == rec.generation and entry["last_step"] >= 0:
                rec.last_step[fragment] = entry["last_step"]
                if entry.get("last_base", -1) >= 0:
                    rec.last_base[fragment] = entry["last_base"]
            if entry["generation"] == rec.generation and entry.get("credited_to"):
                rec.credited_to[fragment] = entry["credited_to"]
