"""A run's phase, told once: which events move a run to which phase, and the one rule that combines them.

Each event type that moves a run has a rank and a phase (`PHASE_OF`). A run's phase is that of its
highest-ranked event, the earliest among equals; "launching" before any. So a run only moves forward
(launching -> running -> finalizing -> an end), and its first end event is final. The shared fold
(run_view.py) takes the rule one event at a time (`next_phase`); the tape's `runs` view
(infra/tape/views.py) takes it over a run's whole history in SQL, from the same table.
"""
from __future__ import annotations

from yeto.schemas.final import (
    ArtifactWritten,
    CheckpointMarkedFinal,
    FinalCutDone,
    FinalCutRequested,
    RunFailed,
    RunFinalized,
    RunStopped,
)
from yeto.schemas.fleet import IslandReplaced, IslandUp
from yeto.schemas.training import LearnerProgress, RoundMerged

LAUNCHING = "launching"
RUN_END = {RunFinalized.__name__: "finalized", RunFailed.__name__: "failed", RunStopped.__name__: "stopped"}
"""The events that end a run, with the phase each ends it in."""
_RUNNING = (IslandUp, IslandReplaced, RoundMerged, LearnerProgress)
_FINALIZING = (FinalCutRequested, FinalCutDone, CheckpointMarkedFinal, ArtifactWritten)

PHASE_OF: dict[str, tuple[int, str]] = {
    **{c.__name__: (1, "running") for c in _RUNNING},
    **{c.__name__: (2, "finalizing") for c in _FINALIZING},
    **{t: (3, phase) for t, phase in RUN_END.items()},
}
"""Event type -> (rank, phase) for every event type that moves a run; any other type leaves its phase."""
_RANK = {LAUNCHING: 0} | {phase: rank for rank, phase in PHASE_OF.values()}


def next_phase(phase: str, event_type: str) -> str:
    """A run's phase after one more of its events (the rule above, one event at a time)."""
    rank, to = PHASE_OF.get(event_type, (0, phase))
    return to if rank > _RANK[phase] else phase
