"""Which learners count as live for quorum and grace: the launcher's island events, and missed heartbeats.

A generation stops counting the moment the launcher reports it exited, preempted, stopped or dropped (runs.py folds
those into the roster's `gone`); its replacement counts from its first admitted message. Otherwise a learner counts
while it is heard from: every push or init admission takes is a heartbeat, and nothing else is (a refused message,
or chunks of one not complete yet, would let a hostile island stay live, hold quorum and never merge). Silence is
measured against the newest admitted arrival from any learner of the run, not against the wall clock alone, so a
syncer that stalled (a slow disk, a long merge) does not find everyone silent when it wakes: a learner is silent
once others were heard more than its bound after it. `learner_timeout_s` bounds silence on the wall clock as well,
and the bound from above.

At a run's start a first-generation learner the launcher announced counts as live before its first push, for
`learner_timeout_s` after the first chunk of the run this syncer heard (`joining`): islands load their model at
different speeds, and without it the first learner's first rounds merge alone, each a whole outer step of one
learner's drift. A replacement does not: it counts from its first chunk (the survivors must not wait on a process
still loading). Time is passed in (docs/SYNC_MATH.md, "Who is live").
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
         num_owned: int, announced: Mapping[str, int] | None = None, started: float | None = None) -> set[str]:
    """Learner ids whose newest generation the launcher has not reported gone and who were heard from in time, and
    those still joining (`joining`: `announced` is the roster's newest generation per learner, `started` when this
    syncer heard the run's first chunk)."""
    newest = max((rec.last_seen for rec in records.values()), default=now)
    heard = {name for name, rec in records.items()
             if rec.generation > gone.get(name, -1)
             and now - rec.last_seen <= config.learner_timeout_s
             and newest - rec.last_seen <= silence_s(rec.step_time_s, config, num_owned)}
    return heard | joining(records, announced or {}, gone=gone, now=now, started=started, config=config)


def joining(records: Mapping[str, LearnerRecord], announced: Mapping[str, int], *, gone: Mapping[str, int], now: float,
            started: float | None, config: SyncConfig) -> set[str]:
    """First-generation learners announced and not gone that have no push admitted yet, while the run's start (the
    first chunk heard) is less than `learner_timeout_s` ago."""
    if started is None or now - started > config.learner_timeout_s:
        return set()
    return {name for name, generation in announced.items()
            if generation == 0 and gone.get(name, -1) < 0
            and (name not in records or (records[name].generation == 0 and not records[name].last_step))}


def join_deadline(started: float | None, config: SyncConfig) -> float | None:
    """When learners still joining stop counting (None: the run has not started here)."""
    return None if started is None else started + config.learner_timeout_s
