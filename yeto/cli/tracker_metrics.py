"""The numbers every experiment tracker gets from a run's events: one pure function, so TensorBoard, W&B and MLflow agree."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yeto.schemas.run_view import RunView, spend_usd

# Per-learner scalars (train/*, eval/*) step by the learner's inner step, one point per optimizer step (a report
# carries every step since the previous one); the merged model's (global/*) by the learners' furthest step, so it
# shares their axis; the run's (sync/*, run/*) by rounds merged: the run's own clock, the same live and replayed.
STEP_TAGS = ("loss", "lr", "tokens_per_s", "step_time_s", "grad_norm")
RUN_TAGS = ("sync/rounds_merged", "sync/global_version", "run/spend_usd", "run/tokens")


@dataclass(frozen=True)
class Point:
    tag: str          # e.g. "train/loss/island-0"; "/" groups them in TensorBoard, W&B and MLflow alike
    value: float
    step: int
    wall_time: float  # the event's own time (Unix seconds), so a replay draws the same time axis as the live run


def _wall(event: Any) -> float:
    ts = getattr(event, "ts", None)
    return ts.timestamp() if ts is not None else 0.0


def global_step(view: RunView) -> int:
    """Where the merged model stands on the step axis: the furthest learner's step."""
    return max((lr.step for lr in view.learners.values()), default=0)


def _run_points(view: RunView, event: Any, wall: float) -> list[Point]:
    step = view.rounds_merged
    tokens = sum(sum(lr.tokens.values()) for lr in view.learners.values())
    values = (view.rounds_merged, max(view.versions.values(), default=0), spend_usd(view, view.last_ts), tokens)
    out = [Point(tag, float(v), step, wall) for tag, v in zip(RUN_TAGS, values)]
    losses = [lr.loss for lr in view.learners.values() if lr.loss is not None]
    if losses:   # no global loss is measured: the learners' latest, averaged, at each merge
        out.append(Point("global/loss", sum(losses) / len(losses), global_step(view), wall))
    return out


def step_points(event: Any) -> list[dict[str, Any]]:
    """Every step a LearnerProgress carries (v3), or its one step (a report built without them)."""
    steps = [s.model_dump() for s in getattr(event, "steps", None) or []]
    return steps or [{k: getattr(event, k, None) for k in ("step", *STEP_TAGS)}]


def _learner_points(event: Any, wall: float) -> list[Point]:
    who = event.learner
    out = [Point(f"train/{tag}/{who}", float(s[tag]), int(s["step"]), wall)
           for s in step_points(event) for tag in STEP_TAGS if s.get(tag) is not None]
    if getattr(event, "eval_loss", None) is not None:
        out.append(Point(f"eval/loss/{who}", float(event.eval_loss), event.step, wall))
    return out


def points(event: Any, view: RunView) -> list[Point]:
    """What `event` adds to the trackers, given the run's view folded up to and including it (no clock, no I/O)."""
    t, wall = getattr(event, "type", None), _wall(event)
    if t == "LearnerProgress":
        return _learner_points(event, wall)
    if isinstance(t, str) and t.startswith("Eval") and getattr(event, "loss", None) is not None:
        # held-out eval (issue #17 item 2): per learner by its step when the event names one, else the global model's
        if getattr(event, "learner", None):
            return [Point(f"eval/loss/{event.learner}", float(event.loss), int(getattr(event, "step", 0) or 0), wall)]
        return [Point("global/eval_loss", float(event.loss), global_step(view), wall)]
    if t == "RoundMerged":
        return _run_points(view, event, wall)
    if t in ("RunFinalized", "RunFailed", "RunStopped"):
        final = _run_points(view, event, wall)
        spend = getattr(event, "spend_usd", None)
        return [p if p.tag != "run/spend_usd" or spend is None else Point(p.tag, float(spend), p.step, wall)
                for p in final]
    return []
