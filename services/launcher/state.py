"""The launcher's state: the shared run fold (schemas/run_view.py), one RunView per run, and its snapshot codec.

The launcher needs nothing beyond the shared view: an island's phase, generation, heartbeat and crashes
drive replacement, and the run's phase says whether a final cut is under way or the run has ended.
"""
from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from yeto.schemas.run_view import RunView, evolve
from yeto.schemas.shape import shape_version

State = dict[str, RunView]
CODEC_VERSION = shape_version(State)   # another shape's snapshot is refolded from seq 1
_JSON = TypeAdapter(State)

__all__ = ["CODEC_VERSION", "State", "backend_of", "dump", "evolve", "load", "recorded_handle"]
# In these phases an island's handle is the one its current generation's IslandUp/IslandReplaced recorded; in
# the others ("replacing", "dropped") it may still be the previous generation's.
OWN_HANDLE = ("up", "exited", "preempted", "finished", "stopped")


def backend_of(spec: dict[str, Any]) -> str:
    """The backend that runs an island of this fleet entry."""
    cloud = spec.get("cloud")
    return "local" if cloud == "local" else "external" if cloud == "external" else "skypilot"


def recorded_handle(state: State, run_id: str, island: int, generation: int) -> str:
    """The backend handle recorded for this island generation ("" when the state holds none for it)."""
    run = state.get(run_id)
    isl = run.islands[island] if run and island < len(run.islands) else None
    return isl.handle if isl and isl.generation == generation and isl.phase in OWN_HANDLE else ""


def dump(state: State) -> bytes:
    return _JSON.dump_json(state)


def load(data: bytes) -> State:
    return _JSON.validate_json(data)
