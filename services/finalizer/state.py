"""The finalizer's state: the shared run view (schemas/run_view.py) plus the final-cut state machine, and its codec.

Phases of the machine: training -> cutting (FinalCutRequested) -> done (FinalCutDone of every syncer shard)
-> marked (CheckpointMarkedFinal) -> written (ArtifactWritten) -> finalized; or failed / stopped from any
phase before finalized. Spend, islands and progress are the view's (one fold for every reader of a run).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime

from pydantic import TypeAdapter
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 too

from yeto.schemas.base import Event
from yeto.schemas.final import ArtifactWritten, CheckpointMarkedFinal, FinalCutDone, FinalCutRequested, LearnerFinalAck
from yeto.schemas.fleet import RunLaunched, learner_name
from yeto.schemas.run_phase import RUN_END
from yeto.schemas.run_view import RunView, fold
from yeto.schemas.shape import shape_version

ENDED = tuple(RUN_END.values())


class Cut(TypedDict):
    """A final cut: every fragment's final version, the snapshot folder(s), one digest."""

    versions: dict[int, int]
    snapshot_path: str
    sha256: str


@dataclass(frozen=True)
class FinalRun:
    view: RunView
    phase: str = "training"
    cut_reason: str = ""
    cut_at: datetime | None = None
    final: Cut | None = None
    cut_parts: dict[int, Cut] = field(default_factory=dict)
    """Syncer shard -> its FinalCutDone, until every shard is in."""
    marked_at: datetime | None = None
    acks: frozenset[str] = frozenset()
    artifact: dict[str, str] = field(default_factory=dict)
    """output and manifest_sha256 of ArtifactWritten."""

    def expected_acks(self) -> set[str]:
        """Learners that can still acknowledge: islands up now (a finished or dead one never will)."""
        return {learner_name(isl.index) for isl in self.view.islands if isl.phase == "up"}


State = dict[str, FinalRun]
CODEC_VERSION = shape_version(State)   # another shape's snapshot is refolded from seq 1
_JSON = TypeAdapter(State)


def combine_cut(parts: dict[int, Cut]) -> Cut:
    """One final cut from the shards' reports: every fragment's version, the snapshot folders, one digest."""
    ordered = [parts[k] for k in sorted(parts)]
    if len(ordered) == 1:
        return Cut(**ordered[0])
    paths = list(dict.fromkeys(part["snapshot_path"] for part in ordered))
    return Cut(versions={p: v for part in ordered for p, v in part["versions"].items()}, snapshot_path=",".join(paths),
               sha256=hashlib.sha256("".join(part["sha256"] for part in ordered).encode()).hexdigest())


def _cut(run: FinalRun, e: Event) -> FinalRun:
    if run.phase in ENDED:
        return run
    if isinstance(e, FinalCutRequested) and run.phase == "training":
        return replace(run, phase="cutting", cut_reason=e.reason, cut_at=e.ts)
    if isinstance(e, FinalCutDone) and run.phase in ("training", "cutting"):
        parts = {**run.cut_parts, e.shard: Cut(versions=e.versions, snapshot_path=e.snapshot_path, sha256=e.sha256)}
        if len(parts) < e.num_shards:
            return replace(run, cut_parts=parts)
        return replace(run, cut_parts=parts, phase="done", final=combine_cut(parts), cut_reason=run.cut_reason or "user")
    if isinstance(e, CheckpointMarkedFinal) and run.phase == "done":
        return replace(run, phase="marked", marked_at=e.ts)
    if isinstance(e, LearnerFinalAck):
        return replace(run, acks=run.acks | {e.learner})
    if isinstance(e, ArtifactWritten):
        return replace(run, phase="written", artifact=dict(output=e.output, manifest_sha256=e.manifest_sha256))
    if e.type in RUN_END:
        return replace(run, phase=RUN_END[e.type])
    return run


def evolve(state: State, e: Event, seq: int = 0) -> State:
    """Fold one event into its run's view and final-cut machine; runs are known from their RunLaunched on."""
    run = state.get(e.run_id)
    if run is None:
        if not isinstance(e, RunLaunched):
            return state
        run = FinalRun(view=RunView(run_id=e.run_id))
    run = replace(run, view=fold(run.view, e, seq))
    return {**state, e.run_id: _cut(run, e)}


def dump(state: State) -> bytes:
    return _JSON.dump_json(state)


def load(data: bytes) -> State:
    return _JSON.validate_json(data)
