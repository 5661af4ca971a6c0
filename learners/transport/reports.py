"""The events a learner publishes about itself: LearnerStarted, LayoutDeclared, LearnerProgress (rate-limited, every
step batched into it), LearnerBeat (rate-limited, while a held-out evaluation advances), LearnerFinalAck.

Each goes on its learner's own subject (`yeto.evt.<run>.<Type>.<learner>`, infra/bus_types.subject_of), the only
one the learner's credential may publish it on; services reject a payload whose learner is not that token.
Pure: the clock is passed in. Ids derive from (run, learner, generation[, step]) (a beat's from its count), so a
republished event is dropped by the stream's de-duplication.
"""
from __future__ import annotations

from typing import Any

from yeto.learners.layout import Layout
from yeto.learners.transport.protocol import StepReport
from yeto.schemas.base import Event, derive_id
from yeto.schemas.final import LearnerFinalAck
from yeto.schemas.layout import LayoutDeclared, TensorEntry
from yeto.schemas.progress import MAX_STEPS_PER_REPORT, LearnerBeat, LearnerStarted, StepPoint
from yeto.schemas.training import LearnerProgress


def step_point(result: StepReport) -> StepPoint:
    return StepPoint(step=result.step, loss=result.loss, lr=result.lr, tokens=result.tokens,
                     tokens_per_s=result.tokens / max(result.seconds, 1e-9), step_time_s=result.seconds,
                     grad_norm=getattr(result, "grad_norm", None))


class Reports:
    """One learner generation's events. Progress is reported at most every `progress_every_s` (sooner for an
    evaluated step, or once MAX_STEPS_PER_REPORT steps wait); each report carries every step since the previous one,
    so the tape holds every step at a bounded event rate."""

    def __init__(self, *, run_id: str, learner: str, generation: int, progress_every_s: float, started_at: float) -> None:
        self.run_id, self.learner, self.generation = run_id, learner, generation
        self.progress_every_s, self.started_at = progress_every_s, started_at
        self.tokens, self.last_at = 0, float("-inf")
        self.last: StepReport | None = None          # the newest step seen
        self.held: list[StepPoint] = []              # the steps since the last report
        self.beats = 0                               # LearnerBeat events made (each one's id)

    def _fields(self, type_: str, *key: object) -> dict[str, Any]:
        return dict(id=derive_id(self.run_id, type_, self.learner, self.generation, *key), run_id=self.run_id,
                    source=self.learner, learner=self.learner, generation=self.generation)

    def started(self, how: dict[str, Any]) -> Event:
        """How this generation runs (the backend's `describe`, as the `start` line prints it)."""
        fields = {k: how[k] for k in LearnerStarted.model_fields if k in how}
        return LearnerStarted(**self._fields("LearnerStarted"), **fields)

    def layout(self, layout: Layout) -> Event:
        tensors = [TensorEntry(name=t.name, shape=list(t.shape), dtype=t.dtype, fragment=p)
                   for p, frag in enumerate(layout.fragments) for t in frag]
        return LayoutDeclared(**self._fields("LayoutDeclared"), fingerprint=layout.fingerprint,
                              num_fragments=layout.num_fragments, tensors=tensors)

    def final_ack(self, versions: dict[int, int]) -> Event:
        return LearnerFinalAck(**self._fields("LearnerFinalAck"), versions=versions)

    def progress(self, result: StepReport, now: float) -> Event | None:
        """Hold the step; a LearnerProgress event with the steps held if `progress_every_s` passed since the last
        one, the step was evaluated (its eval loss goes out with it) or the batch is full."""
        self.tokens += result.tokens
        self.last = result
        self.held.append(step_point(result))
        if (now - self.last_at < self.progress_every_s and len(self.held) < MAX_STEPS_PER_REPORT
                and getattr(result, "eval_loss", None) is None):
            return None
        return self._report(result, now)

    def unreported(self, now: float) -> Event | None:
        """The steps the rate limit still holds, if any (reported at close)."""
        if self.last is None or not self.held:
            return None
        return self._report(self.last, now)

    def beat(self, step: int, done: int, total: int, *, final: bool, now: float) -> Event | None:
        """A LearnerBeat if `progress_every_s` passed since the last report or beat."""
        if now - self.last_at < self.progress_every_s:
            return None
        self.last_at, self.beats = now, self.beats + 1
        return LearnerBeat(**self._fields("LearnerBeat", "beat", self.beats), step=step, batches_done=done,
                           batches=total, final=final)

    def _report(self, result: StepReport, now: float) -> Event:
        self.last_at, steps, self.held = now, self.held, []
        return LearnerProgress(**self._fields("LearnerProgress", result.step), step=result.step, loss=result.loss,
                               tokens=self.tokens, tokens_per_s=self.tokens / max(now - self.started_at, 1e-9),
                               step_time_s=result.seconds, lr=result.lr, eval_loss=getattr(result, "eval_loss", None),
                               steps=steps)
