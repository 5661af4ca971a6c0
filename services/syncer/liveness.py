"""Which learners count as live for quorum and grace: the launcher's island events, and missed heartbeats.

A generation stops counting the moment the launcher reports it exited, preempted, stopped or dropped (runs.py
folds those into the roster's `gone`); its replacement counts from the first chunk it sends. Otherwise a learner
counts while it is heard from: every chunk it sends is a heartbeat. Silence is measured against the newest
arrival from any learner of the run, not against the wall clock alone, so a syncer that stalled (a slow disk, a
long merge) does not find everyone silent when it wakes: a learner is silent once others were heard more than its
bound after it. `learner_timeout_s` bounds silence on the wall clock as well, and the bound from above. Time is
passed in (docs/SYNC_MATH.md, "Who is live").
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.ledger import LearnerRecord

SILENT_GAPS = 4.0   # push gaps missed before a learner is silent: a push may come a step or two late (eval, GC, a slow chunk)
FLOOR_S = 3.0       # never sooner: a learner's first push after its init, scheduler noise on a loaded machine


def push_gap_steps(config: SyncConfig, num_owned: int) -> int:
    """Inner steps between two pushes a learner sends to this syncer: fragment p goes every H steps at offset
    p·H/P, so an instance owning n of the P fragments hears from each learner every ceil(H / n) steps."""
    return math.ceil(config.inner_steps / max(1, num_owned))


def silence_s(step_time_s: float, config: SyncConfig, num_owned: int) -> float:
    """How long a learner may be silent: SILENT_GAPS push gaps at its step-time EMA, within [FLOOR_S, learner_timeout_s]."""
    gaps = SILENT_GAPS * push_gap_steps(config, num_owned) * step_time_s
    return min(config.learner_timeout_s, max(FLOOR_S, gaps))


def live(records: Mapping[str, LearnerRecord], *, now: float, gone: Mapping[str, int], config: SyncConfig,
         num_owned: int) -> set[str]:
    """Learner ids whose newest generation the launcher has not reported gone and who were heard from in time."""
    newest = max((rec.last_seen for rec in records.values()), default=now)
    return {name for name, rec in records.items()
            if rec.generation > gone.get(name, -1)
            and now - rec.last_seen <= config.learner_timeout_s
            and newest - rec.last_seen <= silence_s(rec.step_time_s, config, num_owned)}
