"""A run's shared view (schemas/run_view.py) as the text `yeto status RUN` and `yeto tape replay` print."""
from __future__ import annotations

from datetime import datetime

from yeto.cli.sql import format_table
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.refusal_view import refusal_lines
from yeto.schemas.run_view import RunView, head_usd, spend_usd


def max_steps(recipe: dict) -> int | None:
    """--max-steps from a run's recipe: its limits, else its train section's (where the recipe gives one)."""
    typed = LaunchRecipe.upcast(recipe)
    return typed.limits.max_steps or (typed.train.max_steps if "max_steps" in typed.train.model_fields_set else None)


def eta_s(v: RunView, now: datetime) -> float | None:
    """Seconds left: services/planner/estimate.py's, the one ETA the terminal, status and the dashboard show."""
    from yeto.services.planner.estimate import seconds_left
    return seconds_left(v, now)


def describe(v: RunView, now: datetime | None) -> str:
    now = now or v.last_ts
    until = v.ended_at or now
    lines = [f"run {v.run_id}: {v.phase}" + (f" ({v.reason})" if v.reason else ""),
             f"  started {v.launched_at}" + (f", finished {v.ended_at}" if v.ended_at else "")
             + f", {v.num_events} events, last seq {v.last_seq}",
             f"  rounds merged {v.rounds_merged}; versions "
             + (" ".join(f"{f}:v{n}" for f, n in sorted(v.versions.items())) or "-"),
             f"  spend so far ${spend_usd(v, now):.4f} (head ${head_usd(v, now):.4f}); tokens {v.num_tokens}"]
    eta = eta_s(v, now) if now else None
    if eta is not None:
        step = max((lr.step for lr in v.learners.values()), default=0)
        lines.append(f"  ETA ~{eta / 60:.1f} min (step {step}/{max_steps(v.recipe) or '-'})")
    if v.refusals:      # a cloud said no at launch: what, why, when, and where the planner moved the island
        lines += ["  offers refused at launch:", *refusal_lines(v.refusals)]
    text = "\n".join(lines) + "\n"
    if v.islands:
        rows = [[isl.index, isl.phase, isl.generation, isl.price_per_hour, round(isl.meter.hours_at(until) * 3600),
                 round(isl.meter.usd_at(until), 4)] for isl in v.islands]
        text += format_table(["island", "phase", "generation", "$/hour", "uptime s", "spend $"], rows)
    if v.learners:
        rows = [[name, lr.step, lr.loss, lr.eval_loss, sum(lr.tokens.values())] for name, lr in sorted(v.learners.items())]
        text += format_table(["learner", "step", "loss", "eval loss", "tokens"], rows)
    return text
