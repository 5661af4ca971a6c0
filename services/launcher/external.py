"""The launcher's decisions about external islands (pure): up when their learner connects, finished at max_steps.

The external backend only opens a slot (a credential and a join token); nothing sees the joined learner's process,
so its events say what a local island's processes would: the generation's first LearnerProgress is its connection
(IslandUp, or IslandReplaced for a re-opened slot: the syncer admits the generation from then on, its meter starts),
and a step at or past the recipe's max_steps is its exit with status 0 (the IslandExited the exit watcher would
publish, same id), so the island's phase, meter and the final cut follow as for any island.
"""
from __future__ import annotations

from typing import Any

from yeto.infra.runner.spec import Publish
from yeto.schemas.base import derive_id
from yeto.schemas.fleet import IslandExited, IslandReplaced, IslandUp
from yeto.schemas.island_view import Island
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.run_view import RunView
from yeto.services.launcher.join_token import EXTERNAL


def max_steps(recipe: dict[str, Any]) -> int | None:
    """The learners' max_steps (None where a hand-written recipe gives none)."""
    train = LaunchRecipe.upcast(recipe).train
    return train.max_steps if "max_steps" in train.model_fields_set else None


def handle(island: int, generation: int) -> str:
    return f"{EXTERNAL}:{island}:{generation}"


def needs(run: RunView, isl: Island, *, source: str) -> list[Publish]:
    """What an external island needs now: announced once connected, finished once trained; else nothing."""
    if isl.spec.get("cloud") != EXTERNAL or isl.last_beat is None or run.ended:
        return []
    rid, gen = run.run_id, isl.generation
    fields: dict[str, Any] = dict(run_id=rid, source=source, island=isl.index, generation=gen, spec=isl.spec,
                                  price_per_hour=isl.price_per_hour, backend=EXTERNAL, handle=handle(isl.index, gen))
    if isl.phase == "requested" and gen == 0:
        return [Publish(IslandUp(id=derive_id(rid, "IslandUp", isl.index, 0), **fields))]
    if isl.phase == "replacing":
        return [Publish(IslandReplaced(id=derive_id(rid, "IslandReplaced", isl.index, gen), previous_generation=gen - 1,
                                       **fields))]
    steps = max_steps(run.recipe)
    if isl.phase == "up" and steps is not None and isl.last_step >= steps:
        return [Publish(IslandExited(id=derive_id(rid, "IslandExited", isl.index, gen), exit_code=0,
                                     detail=f"the joined learner trained to step {isl.last_step}", **fields))]
    return []
