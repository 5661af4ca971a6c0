"""The end of a run: the final cut (per syncer shard), marking the result, learners' acknowledgements, the
artifact, and how the run ended (finalized, failed, stopped); with the finalizer's own commands.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field

from yeto.schemas.base import Command, Event, registry

CutReason = Literal["budget", "max_steps", "max_tokens", "max_time", "user"]


@registry.register
class FinalCutRequested(Event):
    """Stop issuing rounds and write the terminal snapshot; the syncer answers with FinalCutDone."""

    type: Literal["FinalCutRequested"] = "FinalCutRequested"
    version: Literal[1] = 1
    reason: CutReason
    detail: str = ""


@registry.register
class FinalCutDone(Event):
    """Published by each syncer shard: its rounds stopped, terminal snapshot written, f32 keyframes broadcast.
    The cut is done when every shard of `num_shards` has reported (the finalizer combines them)."""

    type: Literal["FinalCutDone"] = "FinalCutDone"
    version: Literal[2] = 2
    versions: dict[int, int]                  # fragment -> final global version (this shard's fragments)
    snapshot_path: str
    sha256: str
    keyframe_versions: dict[int, int] = Field(default_factory=dict)  # fragment -> version of its f32 keyframe
    shard: int = 0                            # v2: which syncer instance (`--shard K/N`) ...
    num_shards: int = 1                       # ... of how many


@registry.upcaster("FinalCutDone", 1)
def _final_cut_done_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "shard": 0, "num_shards": 1}


@registry.register
class CheckpointMarkedFinal(Event):
    """The finalizer verified the final keyframes are durable in the keyframe stream: this is the run's result."""

    type: Literal["CheckpointMarkedFinal"] = "CheckpointMarkedFinal"
    version: Literal[1] = 1
    versions: dict[int, int]
    snapshot_path: str
    sha256: str


@registry.register
class LearnerFinalAck(Event):
    """Published by a learner once it applied the final f32 keyframes."""

    type: Literal["LearnerFinalAck"] = "LearnerFinalAck"
    version: Literal[1] = 1
    learner: str
    generation: int = 0
    versions: dict[int, int]


@registry.register
class ArtifactWritten(Event):
    """The artifact is written (and uploaded and verified when --output is remote)."""

    type: Literal["ArtifactWritten"] = "ArtifactWritten"
    version: Literal[2] = 2
    output: str                     # where it is: a local directory, a store URI or hf://org/repo
    local_path: str                 # the directory the finalizer assembled
    artifact_kind: Literal["adapter", "full"]
    files: list[str]
    manifest_sha256: str
    uploaded: bool = False
    signer_public_key: str = ""     # v2: hex Ed25519 key of the stack that signed manifest.json (`yeto verify --key`)


@registry.upcaster("ArtifactWritten", 1)
def _artifact_written_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "signer_public_key": ""}


@registry.register
class RunFinalized(Event):
    type: Literal["RunFinalized"] = "RunFinalized"
    version: Literal[1] = 1
    output: str
    manifest_sha256: str
    reason: CutReason
    spend_usd: float
    acked: list[str] = Field(default_factory=list)      # learners that acknowledged the final keyframes
    missing_acks: list[str] = Field(default_factory=list)


@registry.register
class RunFailed(Event):
    type: Literal["RunFailed"] = "RunFailed"
    version: Literal[1] = 1
    reason: str


@registry.register
class RunStopped(Event):
    """Aborted without an artifact (`yeto down --now`)."""

    type: Literal["RunStopped"] = "RunStopped"
    version: Literal[1] = 1
    reason: str


@registry.register
class RunCopiedBack(Event):
    """Published by the operator's CLI (`yeto pull`) once the run's tape and, when it lives only on the head, its
    artifact are on the laptop and verified: the head may go (its supervisor stops the stack on it)."""

    type: Literal["RunCopiedBack"] = "RunCopiedBack"
    version: Literal[1] = 1
    tape_rows: int                  # the run's events copied (this one not counted)
    last_seq: int                   # the stream sequence of the last of them
    num_files: int = 0              # artifact files fetched and verified (0: uploaded elsewhere, or no artifact)
    manifest_sha256: str = ""       # of the fetched artifact's manifest


# How a run ends: finalized with its artifact written, or stopped, or failed.
ENDING_EVENTS = ("RunFinalized", "ArtifactWritten", "RunStopped", "RunFailed")
T = TypeVar("T", int, float, datetime)


def end_of_run(seen: Mapping[str, T]) -> T | None:
    """When the run ended, from {event type: its time} of the ENDING_EVENTS seen (times or stream sequences); None while
    it runs. A finalized run has ended once both RunFinalized and its ArtifactWritten are in."""
    if ends := [seen[t] for t in ("RunStopped", "RunFailed") if t in seen]:
        return min(ends)
    if "RunFinalized" in seen and "ArtifactWritten" in seen:
        return max(seen["RunFinalized"], seen["ArtifactWritten"])
    return None


@registry.register
class MarkFinal(Command):
    """Verify the final keyframes are in the keyframe stream, then publish CheckpointMarkedFinal."""

    owner: ClassVar[str] = "finalizer"
    type: Literal["MarkFinal"] = "MarkFinal"
    version: Literal[1] = 1
    versions: dict[int, int]
    snapshot_path: str
    sha256: str


@registry.register
class BuildArtifact(Command):
    """Assemble the artifact from the final f32 state and write it to the run's output."""

    owner: ClassVar[str] = "finalizer"
    type: Literal["BuildArtifact"] = "BuildArtifact"
    version: Literal[3] = 3
    recipe: dict[str, Any]
    versions: dict[int, int]
    acked: list[str] = Field(default_factory=list)
    fleet: list[dict[str, Any]] = Field(default_factory=list)    # v2: each island's spec and generations (provenance)
    rounds_merged: int = 0                                        # v2
    learner_steps: dict[str, int] = Field(default_factory=dict)   # v2: learner -> the furthest step it reported
    learner_losses: dict[str, float] = Field(default_factory=dict)  # v3: learner -> its last loss (the model card)
    learner_eval_losses: dict[str, float] = Field(default_factory=dict)  # v3: learner -> its last held-out loss


@registry.upcaster("BuildArtifact", 1)
def _build_artifact_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "fleet": [], "rounds_merged": 0, "learner_steps": {}}


@registry.upcaster("BuildArtifact", 2)
def _build_artifact_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "learner_losses": {}, "learner_eval_losses": {}}


_RECIPE = {"train": {"model": "smollm2-135m", "max_steps": 20}, "limits": {"max_spend": 5.0}, "output": "",
           "recover_timeout_s": 600}
EXAMPLES = [
    FinalCutRequested(id="ex-final-cut-requested", run_id="r-demo", source="finalizer", reason="budget",
                      detail="spend $4.98 would pass --max-spend $5.00 within the next accounting period"),
    FinalCutDone(id="ex-final-cut-done", run_id="r-demo", source="syncer", versions={0: 12, 1: 12},
                 snapshot_path="/state/runs/r-demo/syncer/final.safetensors", sha256="0" * 64, keyframe_versions={0: 12, 1: 12}),
    CheckpointMarkedFinal(id="ex-checkpoint-marked-final", run_id="r-demo", source="finalizer", versions={0: 12, 1: 12},
                          snapshot_path="/state/runs/r-demo/syncer/final.safetensors", sha256="0" * 64),
    LearnerFinalAck(id="ex-learner-final-ack", run_id="r-demo", source="learner", learner="island-0", versions={0: 12, 1: 12}),
    ArtifactWritten(id="ex-artifact-written", run_id="r-demo", source="finalizer", output="/state/runs/r-demo/artifact",
                    local_path="/state/runs/r-demo/artifact", artifact_kind="adapter",
                    files=["adapter_config.json", "adapter_model.safetensors", "manifest.json", "manifest.sig"],
                    manifest_sha256="1" * 64, signer_public_key="2" * 64),
    RunFinalized(id="ex-run-finalized", run_id="r-demo", source="finalizer", output="/state/runs/r-demo/artifact",
                 manifest_sha256="1" * 64, reason="max_steps", spend_usd=0.0, acked=["island-0"], missing_acks=[]),
    RunFailed(id="ex-run-failed", run_id="r-demo", source="finalizer", reason="every island was dropped"),
    RunStopped(id="ex-run-stopped", run_id="r-demo", source="finalizer", reason="yeto down --now"),
    RunCopiedBack(id="ex-run-copied-back", run_id="r-demo", source="cli", tape_rows=4210, last_seq=4388, num_files=3,
                  manifest_sha256="1" * 64),
    MarkFinal(id="ex-mark-final", run_id="r-demo", source="finalizer", versions={0: 12}, snapshot_path="/s/final",
              sha256="0" * 64),
    BuildArtifact(id="ex-build-artifact", run_id="r-demo", source="finalizer", recipe=_RECIPE, versions={0: 12},
                  acked=["island-0"], fleet=[{"island": 0, "cloud": "local", "gpu": "cpu", "count": 1, "generations": 2}],
                  rounds_merged=12, learner_steps={"island-0": 48}, learner_losses={"island-0": 1.25},
                  learner_eval_losses={"island-0": 1.5}),
]
