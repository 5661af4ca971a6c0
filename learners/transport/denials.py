"""When the bus refuses a learner's own subjects for good: its credential is another island's (pure; time passed in).

A learner started under another island's genuine credential connects, and the server refuses (a permissions
violation, the connection stays up) every publish and watch on the subjects that are its own: those the credential
issued to it would be granted (infra/bus/perms.py). A genuine learner meets such a refusal only for a moment (its
permissions changed by a users-file reload in flight); one acknowledged publish ends that moment. So the verdict is
refusals on its own subjects, at least `min_count` of them spanning `stop_after_s`, with no publish acknowledged
in between. Refusals of subjects that are not its own are not counted: they say nothing about whose credential it is.
"""
from __future__ import annotations

from collections.abc import Callable

DENIED_S = 10.0        # longer than a reload in flight, short beside a learner retrying for good
DENIED_MIN = 3


class OwnDenials:
    def __init__(self, own: Callable[[str], bool], *, stop_after_s: float = DENIED_S, min_count: int = DENIED_MIN):
        self.own, self.stop_after_s, self.min_count = own, stop_after_s, min_count
        self.first: float | None = None     # when the refusals since the last acknowledged publish began
        self.count = 0
        self.num_acked = 0                  # the bus's count of acknowledged publishes when they began

    def refused(self, subject: str, now: float, num_acked: int) -> bool:
        """One refusal of `subject`; True once the learner should stop (its own subjects refused for good)."""
        if not self.own(subject):
            return False
        if self.first is None or num_acked != self.num_acked:
            self.first, self.count, self.num_acked = now, 0, num_acked
        self.count += 1
        return self.count >= self.min_count and now - self.first >= self.stop_after_s
