"""The events a learner publishes about itself: LayoutDeclared, LearnerProgress (rate-limited), LearnerFinalAck.

Each goes on its learner's own subject (`yeto.evt.<run>.<Type>.<learner>`, infra/bus_types.subject_of), the only
one the learner's credential may publish it on; services reject a payload whose learner is not that token.
Pure: the clock is passed in. Ids derive from (run, learner, generation[, step]), so a republished
event is dropped by the stream's de-duplication.
"""
from __future__ import annotations

from typing import Any

from yeto.learners.layout import Layout
from yeto.learners.transport.protocol import StepReport
from yeto.schemas.base import Event, derive_id
from yeto.schemas.final import LearnerFinalAck
from yeto.schemas.layout import LayoutDeclared, TensorEntry
from yeto.schemas.training import LearnerProgress


class Reports:
    """One learner generation's events. Progress is reported at most every `progress_every_s`; the tokens
    of the steps in between accumulate into the next report."""

    def __init__(self, *, run_id: str, learner: str, generation: int, progress_every_s: float, started_at: float) -> None:
        self.run_id, self.learner, self.generation = run_id, learner, generation
        self.progress_every_s, self.started_at = progress_every_s, started_at
        self.tokens, self.last_at = 0, float("-inf")
        self.last: StepReport | None = None          # the newest step seen
        self.reported: StepReport | None = None      # the newest step reported

    def _fields(self, type_: str, *key: object) -> dict[str, Any]:
        return dict(id=derive_id(self.run_id, type_, self.learner, self.generation, *key), run_id=self.run_id,
                    source=self.learner, learner=self.learner, generation=self.generation)

    def layout(self, layout: Layout) -> Event:
        tensors = [TensorEntry(name=t.name, shape=list(t.shape), dtype=t.dtype, fragment=p)
                   for p, frag in enumerate(layout.fragments) for t in frag]
        return LayoutDeclared(**self._fields("LayoutDeclared"), fingerprint=layout.fingerprint,
                              num_fragments=layout.num_fragments, tensors=tensors)

    def final_ack(self, versions: dict[int, int]) -> Event:
        return LearnerFinalAck(**self._fields("LearnerFinalAck"), versions=versions)

    def progress(self, result: StepReport, now: float) -> Event | None:
        """Count the step; a LearnerProgress event if `progress_every_s` passed since the last one."""
        self.tokens += result.tokens
        self.last = result
        if now - self.last_at < self.progress_every_s and getattr(result, "eval_loss", None) is None:
            return None     # an evaluated step is never held back: its eval loss would be lost
        return self._report(result, now)

    def unreported(self, now: float) -> Event | None:
        """The newest step, if the rate limit held it back (reported at close)."""
        if self.last is None or self.last is self.reported:
            return None
        return self._report(self.last, now)

    def _report(self, result: StepReport, now: float) -> Event:
        self.last_at, self.reported = now, result
        return LearnerProgress(**self._fields("LearnerProgress", result.step), step=result.step, loss=result.loss,
                               tokens=self.tokens, tokens_per_s=self.tokens / max(now - self.started_at, 1e-9),
                               step_time_s=result.seconds, lr=result.lr, eval_loss=getattr(result, "eval_loss", None))
