"""How long an island that has reported progress may go silent before the launcher preempts it (pure).

A frozen island (its process alive, no progress: SIGSTOP, a hung collective, a dead link that keeps TCP up) shows
only as silence. Once the island has shown its pace, the bound is GAPS times that pace, at least the floor (FLOOR_S,
or the head's $YETO_SILENCE_FLOOR_S, read by wiring.py: docs/CONFIG.md); the
recipe's `heartbeat_timeout_s` stays the cap, and governs alone where the pace does not yet say how long the next
silence may be: before the generation reported an evaluated step (an evaluation beats only after each held-out batch,
and one batch of a big model may be long), and once it trained to max_steps (its final pushes and evaluation come next,
then its exit; the final evaluation beats after each batch too, so the cap bounds one batch, not the whole evaluation).
Before the first progress `startup_timeout_s` governs (logic.py): a big model's load and first step can take many
minutes.

The pace is the longest interval between two of the generation's signs of life, LearnerProgress or LearnerBeat (their
own times: an island's clock offset cancels out), and at least REPORT_EVERY_S plus its last step time: a learner
reports at most every REPORT_EVERY_S, or after MAX_STEPS_PER_REPORT steps, or at once after an evaluated step, and
beats at most every REPORT_EVERY_S while an evaluation advances (learners/transport/reports.py).
The constants' evidence is in docs/LAUNCH.md ("Island health").
"""
from __future__ import annotations

from dataclasses import dataclass

from yeto.schemas.island_view import Island
from yeto.schemas.launch_recipe import LaunchRecipe

REPORT_EVERY_S = 2.0   # learners/bus_client.py's progress_every_s
GAPS = 8.0             # silences seen on 57 tapes: at most 3.3 paces (a learner's second report), 1.44 after it
FLOOR_S = 60.0         # never sooner: a loaded host, a link the bus client rides out by reconnecting, clock offsets


@dataclass(frozen=True)
class Bound:
    """How long the island may be silent, and why that long (said in the IslandPreempted reason)."""

    seconds: float
    why: str


def heartbeat_bound(recipe: LaunchRecipe, isl: Island, step_time_s: float | None, floor_s: float = FLOOR_S) -> Bound:
    """The silence bound of an island whose current generation reported progress; `step_time_s`: its last step's;
    `floor_s`: the least bound of the pace rule."""
    cap = recipe.timeouts.heartbeat_timeout_s
    if isl.last_step >= recipe.train.max_steps:
        return Bound(cap, "heartbeat_timeout_s: trained to max_steps, its final pushes and evaluation run (beating per batch)")
    if recipe.train.eval_every and not isl.evaluated:
        return Bound(cap, "heartbeat_timeout_s: no evaluated step reported yet")
    pace = max(isl.beat_gap_s, REPORT_EVERY_S + (step_time_s or 0.0))
    return Bound(min(cap, max(floor_s, GAPS * pace)),
                 f"{GAPS:g} x its pace {pace:.1f}s, at least {floor_s:g}s, at most heartbeat_timeout_s {cap:g}s")
