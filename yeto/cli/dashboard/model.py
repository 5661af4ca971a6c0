"""The dashboard's picture of one run: the shared fold plus the series a page draws (pure: no clock, no I/O)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from yeto.cli.dashboard.settings import config
from yeto.cli.describe import eta_s, max_steps
from yeto.cli.tracker_metrics import global_step, step_points
from yeto.schemas.fleet import ISLAND_ENDS
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.run_view import RunView, fold, spend_usd

MAX_POINTS = 1500      # per series: a long run's older points are thinned, the page stays light
MAX_ROUNDS = 40        # the rounds table shows the latest ones
HOW = ("backend", "ranks", "shard", "tuning", "dtype", "quantization", "device", "trainable", "parameters")


@dataclass
class Board:
    view: RunView | None = None
    last_seq: int = 0
    train: dict[str, list[list[float]]] = field(default_factory=dict)
    """Learner -> [t, step, loss] for every optimizer step; t in seconds since the run was launched (a report's
    earlier steps are placed back by their own step times)."""
    lr: dict[str, list[list[float]]] = field(default_factory=dict)
    """Learner -> [t, step, learning rate], every step."""
    throughput: dict[str, list[list[float]]] = field(default_factory=dict)
    """Learner -> [t, step, tokens/s of that step], every step."""
    grad_norm: dict[str, list[list[float]]] = field(default_factory=dict)
    """Learner -> [t, step, gradient norm before clipping], every step the backend measured it."""
    how: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Learner -> how its latest generation runs (LearnerStarted: ranks, shard, tuning, dtype, ...)."""
    evals: dict[str, list[list[float]]] = field(default_factory=dict)
    """Learner (or "global") -> [t, step, eval loss], from any event that reports an eval loss."""
    merged: list[list[float]] = field(default_factory=list)
    """[t, the furthest learner's step, mean of the learners' latest losses] at each RoundMerged."""
    rounds: list[dict[str, Any]] = field(default_factory=list)
    spans: list[dict[str, Any]] = field(default_factory=list)
    """One per island generation: start, end (None while up), how it started (up|replaced) and ended."""
    rate: dict[str, float] = field(default_factory=dict)


def _get(e: Any, key: str) -> Any:
    return e.get(key) if isinstance(e, dict) else getattr(e, key, None)


def _append(series: list[list[float]], point: list[float]) -> None:
    series.append(point)
    if len(series) > MAX_POINTS:
        series[:] = series[::-2][::-1]      # every other point, the newest kept


def _since(board: Board, ts: Any) -> float | None:
    start = board.view.launched_at if board.view else None
    return round((ts - start).total_seconds(), 3) if isinstance(ts, datetime) and start else None


def _island(board: Board, kind: str, e: Any, t: float) -> None:
    island, gen = _get(e, "island"), _get(e, "generation")
    mine = [s for s in board.spans if s["island"] == island]
    if kind in ("IslandUp", "IslandReplaced"):
        for s in mine:
            if s["end"] is None:
                s["end"], s["ended"] = t, "replaced"
        board.spans.append({"island": island, "generation": gen, "start": t, "end": None,
                            "started": "up" if kind == "IslandUp" else "replaced", "ended": None})
        return
    for s in reversed(mine):
        if s["generation"] == gen:      # an exit then its preemption: the span ends once, named by the later news
            s["end"] = t if s["end"] is None else s["end"]
            s["ended"] = "preempted" if kind == "IslandPreempted" else (s["ended"] or ISLAND_ENDS[kind])
            return


def _steps(board: Board, learner: str, event: Any, t: float) -> None:
    """Every step a report carries, each at its own time: the report's, less the step times that came after it."""
    later = 0.0
    points = []
    for s in reversed(step_points(event)):
        points.append((round(t - later, 3), s))
        later += s.get("step_time_s") or 0.0
    for at, s in reversed(points):
        for series, key in ((board.train, "loss"), (board.lr, "lr"), (board.throughput, "tokens_per_s"),
                            (board.grad_norm, "grad_norm")):
            if s.get(key) is not None:
                _append(series.setdefault(learner, []), [at, s["step"], s[key]])


def absorb(board: Board, seq: int, event: Any) -> Board:
    """The board after one more tape event (a parsed Event, or the payload dict of a type this Yeto does not know)."""
    board.view, board.last_seq = fold(board.view, event, seq), seq
    kind, t = _get(event, "type"), _since(board, _get(event, "ts"))
    if t is None:
        return board
    learner = _get(event, "learner")
    if kind == "LearnerProgress":
        _steps(board, learner, event, t)
        board.rate[learner] = event.tokens_per_s
    if kind == "LearnerStarted":
        board.how[learner] = {k: _get(event, k) for k in HOW}
    loss = _get(event, "eval_loss") if kind == "LearnerProgress" else (_get(event, "eval_loss") or _get(event, "loss"))
    if loss is not None and (kind == "LearnerProgress" or "Eval" in str(kind)):
        _append(board.evals.setdefault(learner or "global", []), [t, _get(event, "step") or 0, float(loss)])
    if kind == "RoundMerged":
        losses = [lr.loss for lr in board.view.learners.values() if lr.loss is not None]
        if losses:
            _append(board.merged, [t, global_step(board.view), sum(losses) / len(losses)])
        board.rounds = (board.rounds + [{"t": t, "fragment": event.fragment, "version": event.global_version,
                                         "responders": list(event.responders),
                                         "staleness": list(event.staleness)}])[-MAX_ROUNDS:]
    if kind in ISLAND_ENDS or kind in ("IslandUp", "IslandReplaced"):
        _island(board, kind, event, t)
    return board


def snapshot(board: Board, now: datetime) -> dict[str, Any]:
    """What the page draws, JSON-ready. Only numbers and names: no recipe, no paths, no credentials."""
    v = board.view
    assert v is not None
    until = v.ended_at or now
    up = {f"island-{isl.index}" for isl in v.islands if isl.phase == "up"}
    limits = LaunchRecipe.upcast(v.recipe).limits
    return {
        "run_id": v.run_id, "phase": v.phase, "reason": v.reason, "last_seq": board.last_seq,
        "num_events": v.num_events, "launched_at": v.launched_at.isoformat() if v.launched_at else None,
        "elapsed_s": _since(board, until) or 0.0, "ended": bool(v.ended),
        "islands": [{"index": i.index, "phase": i.phase, "generation": i.generation, "gpu": _spec(i.spec),
                     "price_per_hour": i.price_per_hour, "usd": round(i.meter.usd_at(until), 6)} for i in v.islands],
        "spans": board.spans,
        "learners": [{"name": n, "step": lr.step, "loss": lr.loss, "tokens": sum(lr.tokens.values()),
                      "tokens_per_s": board.rate.get(n)} for n, lr in sorted(v.learners.items())],
        "train": board.train, "evals": board.evals, "merged": board.merged, "lr": board.lr,
        "throughput": board.throughput, "grad_norm": board.grad_norm, "config": config(v.recipe, board.how),
        "rounds": board.rounds, "rounds_merged": v.rounds_merged, "versions": v.versions,
        "tokens": v.num_tokens,
        "tokens_per_s": sum(r for n, r in board.rate.items() if n in up) if not v.ended else 0.0,
        "spend_usd": round(spend_usd(v, now), 6), "max_spend": limits.max_spend,
        "step": max((lr.step for lr in v.learners.values()), default=0), "max_steps": max_steps(v.recipe),
        "eta_s": eta_s(v, now),
    }


def _spec(spec: dict[str, Any]) -> str:
    gpu = f"{spec.get('count') or 1}x{spec.get('gpu') or '?'}"
    return f"{spec.get('cloud') or '?'}:{gpu}" + (" spot" if spec.get("spot") else "")
