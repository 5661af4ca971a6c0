"""The one fold of a run that the launcher, the finalizer and the CLI share: lifecycle, islands, spend, progress.

`fold(view, event, seq)` is pure (no clock, no I/O). It takes parsed events; anything else (a tape payload
of a type this Yeto does not know) only counts as an event seen. Spend follows schemas/spend.py, and
`spend_usd(view, now)` prices the open intervals up to a time the caller passes in. The run's phase follows
schemas/run_phase.py's table. infra/tape/views.py computes the same numbers in SQL; tests/tape/test_tape_views.py
checks the two agree on one tape.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from yeto.schemas.base import SYSTEM_RUN, Event
from yeto.schemas.final import FinalCutRequested, RunFailed, RunFinalized, RunStopped
from yeto.schemas.fleet import IslandEvent, RunLaunched
from yeto.schemas.island_view import Island, beat, fold_island, island_index
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.offers import OfferRefused, ReplanFailed
from yeto.schemas.progress import LearnerBeat
from yeto.schemas.refusal_view import Refusal, fold_refusal
from yeto.schemas.run_phase import LAUNCHING, next_phase
from yeto.schemas.spend import hours_between
from yeto.schemas.training import LearnerProgress, RoundMerged


@dataclass(frozen=True)
class Learner:
    step: int = 0
    """The highest step reported (any generation)."""
    loss: float | None = None
    """The last reported loss."""
    tokens: dict[int, int] = field(default_factory=dict)
    """Generation -> the tokens it last reported (each generation counts from zero)."""
    eval_loss: float | None = None
    """The last reported held-out loss (TrainRecipe.eval_every)."""
    step_time_s: float | None = None
    """The last reported seconds per step: the ETA's pace (services/planner/estimate.py)."""


@dataclass(frozen=True)
class RunView:
    run_id: str
    fleet: tuple[dict[str, Any], ...] = ()
    recipe: dict[str, Any] = field(default_factory=dict)
    launched_at: datetime | None = None
    phase: str = LAUNCHING
    """launching | running | finalizing | finalized | failed | stopped: schemas/run_phase.py's rule"""
    reason: str = ""
    """Why the run is finalizing or ended (the final cut's reason, then the end event's)."""
    ended: str = ""
    """RunFinalized | RunFailed | RunStopped: the run's first end event."""
    ended_at: datetime | None = None
    islands: tuple[Island, ...] = ()
    learners: dict[str, Learner] = field(default_factory=dict)
    rounds_merged: int = 0
    versions: dict[int, int] = field(default_factory=dict)
    """Fragment -> its latest merged global version."""
    refusals: tuple[Refusal, ...] = ()
    """Offers a cloud refused at launch and where each island moved (schemas/refusal_view.py)."""
    num_events: int = 0
    last_ts: datetime | None = None
    last_seq: int = 0
    """The stream sequence of the last event folded (0 when the caller passed none)."""

    @property
    def num_tokens(self) -> int:
        return sum(n for learner in self.learners.values() for n in learner.tokens.values())

    @property
    def head_price_per_hour(self) -> float:
        return LaunchRecipe.upcast(self.recipe).prices.head_price_per_hour


def head_usd(view: RunView, now: datetime | None) -> float:
    """The head VM's part of the spend, up to `now` (capped at the run's end)."""
    return view.head_price_per_hour * hours_between(view.launched_at, view.ended_at or now)


def spend_usd(view: RunView, now: datetime | None) -> float:
    """Islands plus head, up to `now` (capped at the run's end)."""
    return head_usd(view, now) + sum(isl.meter.usd_at(view.ended_at or now) for isl in view.islands)


def _set_island(view: RunView, isl: Island) -> RunView:
    islands = list(view.islands)
    islands[isl.index] = isl
    return replace(view, islands=tuple(islands))


def _progress(view: RunView, e: LearnerProgress) -> RunView:
    old = view.learners.get(e.learner, Learner())
    learner = Learner(step=max(old.step, e.step), loss=e.loss, tokens={**old.tokens, e.generation: e.tokens},
                      eval_loss=old.eval_loss if e.eval_loss is None else e.eval_loss, step_time_s=e.step_time_s or None)
    view = replace(view, learners={**view.learners, e.learner: learner})
    i = island_index(e.learner)
    return _set_island(view, beat(view.islands[i], e)) if i is not None and i < len(view.islands) else view


def _evolve(v: RunView, e: Event) -> RunView:
    if isinstance(e, RunLaunched):
        if v.launched_at is not None:       # a second RunLaunched of the run changes nothing
            return v
        islands = tuple(Island.launched(i, spec, e.ts) for i, spec in enumerate(e.fleet))
        return replace(v, fleet=tuple(e.fleet), recipe=e.recipe, launched_at=e.ts, islands=islands)
    if isinstance(e, (RunFinalized, RunFailed, RunStopped)):
        if v.ended:
            return v
        islands = tuple(replace(isl, meter=isl.meter.stop(e.ts)) for isl in v.islands)
        v = replace(v, ended=e.type, ended_at=e.ts, reason=e.reason, islands=islands)
    elif isinstance(e, IslandEvent) and 0 <= e.island < len(v.islands):
        v = _set_island(replace(v, refusals=fold_refusal(v.refusals, e)),
                        fold_island(v.islands[e.island], e, billing=not v.ended))
    elif isinstance(e, (OfferRefused, ReplanFailed)):
        v = replace(v, refusals=fold_refusal(v.refusals, e))
    elif isinstance(e, LearnerProgress):
        v = _progress(v, e)
    elif isinstance(e, LearnerBeat) and (i := island_index(e.learner)) is not None and i < len(v.islands):
        v = _set_island(v, beat(v.islands[i], e))
    elif isinstance(e, RoundMerged):
        v = replace(v, rounds_merged=v.rounds_merged + 1, versions={**v.versions, e.fragment: e.global_version})
    elif isinstance(e, FinalCutRequested) and not v.ended:
        v = replace(v, reason=e.reason)
    return replace(v, phase=next_phase(v.phase, e.type))


def _run_of(message: Any, default: str) -> str:
    """The run a message names: an event's or a command's field (both are models), a raw row's key."""
    return message.get("run_id", default) if isinstance(message, dict) else getattr(message, "run_id", default)


def fold(view: RunView | None, event: Any, seq: int = 0) -> RunView:
    """The run's view after one more event; `view` None starts the view of the event's run. An event that names
    another run than the view's changes nothing: a view is started with the run of the subject the events came on
    (what the server vouches for), and a payload's claim of another run is not taken (the tape leaves such events
    out of `vouched`; this keeps a caller that did not ask it from being misled)."""
    if view is None:
        view = RunView(run_id=_run_of(event, SYSTEM_RUN))
    elif _run_of(event, view.run_id) != view.run_id:
        return view
    view = replace(view, num_events=view.num_events + 1, last_seq=seq or view.last_seq)
    if not isinstance(event, Event):
        return view
    return _evolve(replace(view, last_ts=event.ts), event)


def evolve(runs: dict[str, RunView], event: Event, seq: int = 0) -> dict[str, RunView]:
    """Every run's view after one more event; a run is known from its RunLaunched on (other events before it,
    and events of no run, change nothing)."""
    view = runs.get(event.run_id)
    if view is None and not isinstance(event, RunLaunched):
        return runs
    return {**runs, event.run_id: fold(view, event, seq)}
