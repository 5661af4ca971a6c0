"""Who may push to a run, and how much: the launcher's announcements as the data plane's admission reads them.

The launcher's IslandUp / IslandReplaced events (folded in runs.py) announce each learner generation with its
ranks; the island ends say which generation is gone (liveness.py). The checks against it live in admission/.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Roster:
    """A run's announced learners: learner id -> newest generation announced, and its ranks (nodes x count)."""

    generations: Mapping[str, int] = field(default_factory=dict)
    ranks: Mapping[str, int] = field(default_factory=dict)
    tokens_per_step: int = 0        # token slots one rank takes per inner step (micro_batch x grad_accum x seq_len)
    gone: Mapping[str, int] = field(default_factory=dict)   # learner id -> newest generation reported gone (liveness.py)
