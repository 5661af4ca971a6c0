"""The interface every island backend implements: start one island generation, read its status, stop it.

Backends are synchronous (the launcher calls them in a worker thread) and idempotent: starting a
generation that already runs returns its handle; stopping one that is gone does nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from yeto.schemas.fleet import learner_name
from yeto.schemas.learner_contract import LearnerArgs


@dataclass(frozen=True, kw_only=True)
class IslandLaunch:
    """Everything a backend needs to start one generation of one island."""

    run_id: str
    """The run."""
    island: int
    """Index of the island in the run's fleet."""
    generation: int
    """Incarnation: 0 at launch, +1 per replacement (the learner's --generation)."""
    spec: dict[str, Any]
    """The fleet entry: cloud, gpu, count, nodes, region, spot."""
    recipe: dict[str, Any]
    """The run's recipe (LaunchRun.recipe): `train` is the learner's TrainRecipe."""
    num_islands: int
    """Islands in the run (the learners' data sharding)."""
    nats_url: str
    """The URL learners reach the stack at."""
    start_step: int = 0
    """Where this generation resumes: its predecessor's last reported step (0 for generation 0)."""

    @property
    def learner(self) -> str:
        return learner_name(self.island)


@dataclass(frozen=True)
class IslandStatus:
    """What the backend sees: running, or exited with a code (None when killed or lost without one)."""

    running: bool
    exit_code: int | None = None
    detail: str = ""


class IslandRef(NamedTuple):
    """One island generation as the launcher's state records it (its handle: what the backend returned at start)."""

    run_id: str
    island: int
    generation: int
    handle: str


class Backend(Protocol):
    name: str

    def start(self, launch: IslandLaunch) -> str:
        """Start the island generation (or find it started); return its handle."""

    def status(self, run_id: str, island: int, generation: int, handle: str) -> IslandStatus:
        """The island generation's status now."""

    def statuses(self, islands: list[IslandRef]) -> list[IslandStatus]:
        """The status of each of these island generations, in order: what the launcher's watcher polls (a cloud
        backend answers a whole fleet from one listing of its jobs, read at most as often as it allows)."""

    def stop(self, run_id: str, island: int, generation: int, handle: str) -> None:
        """Stop the island generation; nothing if it is already gone."""


def learner_args(launch: IslandLaunch, recipe_path: str | Path) -> LearnerArgs:
    """The learner contract of this island generation (ranks and rendezvous are the backend's business)."""
    return LearnerArgs(run_id=launch.run_id, learner=launch.learner, generation=launch.generation,
                       nats_url=launch.nats_url, recipe=str(recipe_path), learner_index=launch.island,
                       num_learners=launch.num_islands, start_step=launch.start_step)
