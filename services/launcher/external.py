"""The launcher's decision about external islands (pure): one whose learner trained to max_steps has finished.

A local island finishes when its processes exit with status 0; nothing sees a joined learner's process, so its
progress says it instead: the current generation reported a step at or past the recipe's max_steps. The event is
the IslandExited the exit watcher would publish (same id), so the island's phase, meter and the final cut follow
as for any island that finished.
"""
from __future__ import annotations

from typing import Any

from yeto.infra.service_spec import Publish
from yeto.schemas.base import derive_id
from yeto.schemas.fleet import IslandExited
from yeto.schemas.island_view import Island
from yeto.schemas.run_view import RunView
from yeto.services.launcher.join_token import EXTERNAL


def max_steps(recipe: dict[str, Any]) -> int | None:
    value = (recipe.get("train") or {}).get("max_steps") or recipe.get("max_steps")
    return int(value) if value else None


def finished(run: RunView, isl: Island, *, source: str) -> list[Publish]:
    """IslandExited(0) for an external island up whose current generation reached max_steps; else nothing."""
    steps = max_steps(run.recipe)
    if isl.spec.get("cloud") != EXTERNAL or isl.phase != "up" or isl.last_beat is None or steps is None:
        return []
    if isl.last_step < steps:
        return []
    return [Publish(IslandExited(
        id=derive_id(run.run_id, "IslandExited", isl.index, isl.generation), run_id=run.run_id, source=source,
        island=isl.index, generation=isl.generation, spec=isl.spec, price_per_hour=isl.price_per_hour,
        backend=EXTERNAL, handle=isl.handle, exit_code=0, detail=f"the joined learner trained to step {isl.last_step}"))]
