"""Events and commands of a run's life: launch, islands (up, preempted, replaced, dropped), final cut, artifact, end.

Island events carry the island's spec and `price_per_hour`, so a run's spend is derivable from the tape alone:
uptime runs from IslandUp / IslandReplaced to IslandExited / IslandPreempted / IslandDropped / IslandStopped.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from yeto.schemas.base import Command, Event, registry

CutReason = Literal["budget", "max_steps", "max_tokens", "max_time", "user"]


def learner_name(island: int) -> str:
    """The learner id of an island (the same for all its generations)."""
    return f"island-{island}"


class IslandEvent(Event):
    """Fields every island event carries."""

    island: int                     # index in the run's fleet
    generation: int = 0             # incarnation: 0 at launch, +1 per replacement
    spec: dict[str, Any]            # the fleet entry: cloud, gpu, count, nodes, region, spot
    price_per_hour: float = 0.0     # USD per hour while up (0 for local islands)
    backend: str = "local"          # local | skypilot
    handle: str = ""                # backend handle: process group id, managed job id


@registry.register
class RunLaunched(Event):
    """The launcher accepted a run; `recipe` holds `train` (TrainRecipe), `limits`, `output`, `recover_timeout_s`."""

    type: Literal["RunLaunched"] = "RunLaunched"
    version: Literal[1] = 1
    fleet: list[dict[str, Any]]
    recipe: dict[str, Any]


@registry.register
class IslandRequested(IslandEvent):
    type: Literal["IslandRequested"] = "IslandRequested"
    version: Literal[1] = 1


@registry.register
class IslandUp(IslandEvent):
    """The backend runs the island's processes (generation 0); uptime starts."""

    type: Literal["IslandUp"] = "IslandUp"
    version: Literal[1] = 1


@registry.register
class IslandExited(IslandEvent):
    """The backend saw the island's processes end; exit_code 0 = trained to the end, None = killed or lost."""

    type: Literal["IslandExited"] = "IslandExited"
    version: Literal[1] = 1
    exit_code: int | None = None
    detail: str = ""


@registry.register
class IslandPreempted(IslandEvent):
    """The island (this generation) is gone: preempted, crashed, killed or silent; a replacement follows."""

    type: Literal["IslandPreempted"] = "IslandPreempted"
    version: Literal[1] = 1
    reason: str


@registry.register
class IslandReplaced(IslandEvent):
    """A replacement (this generation, same spec) is up; uptime starts again."""

    type: Literal["IslandReplaced"] = "IslandReplaced"
    version: Literal[1] = 1
    previous_generation: int


@registry.register
class IslandDropped(IslandEvent):
    """The island is given up (not back within --recover-timeout, or crashing); the run goes on without it."""

    type: Literal["IslandDropped"] = "IslandDropped"
    version: Literal[1] = 1
    reason: str


@registry.register
class IslandStopped(IslandEvent):
    """The island was stopped on purpose (final cut done, `yeto down`); uptime ends."""

    type: Literal["IslandStopped"] = "IslandStopped"
    version: Literal[1] = 1
    reason: str = "run ended"


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
    version: Literal[1] = 1
    output: str                     # where it is: a local directory, a store URI or hf://org/repo
    local_path: str                 # the directory the finalizer assembled
    artifact_kind: Literal["adapter", "full"]
    files: list[str]
    manifest_sha256: str
    uploaded: bool = False


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


class IslandCommand(Command):
    owner: ClassVar[str] = "launcher"
    island: int
    generation: int = 0
    spec: dict[str, Any]


@registry.register
class StartIsland(IslandCommand):
    """Start one generation of an island (spawning happens once, in the launcher's command handler)."""

    type: Literal["StartIsland"] = "StartIsland"
    version: Literal[2] = 2
    recipe: dict[str, Any]
    num_islands: int
    price_per_hour: float = 0.0
    start_step: int = 0             # v2: a replacement resumes where its predecessor stopped (step and data shard)


@registry.upcaster("StartIsland", 1)
def _start_island_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "start_step": 0}


@registry.register
class StopIsland(IslandCommand):
    type: Literal["StopIsland"] = "StopIsland"
    version: Literal[1] = 1
    reason: str = "run ended"
    price_per_hour: float = 0.0


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
    version: Literal[1] = 1
    recipe: dict[str, Any]
    versions: dict[int, int]
    acked: list[str] = Field(default_factory=list)


_SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False}
_ISLAND = dict(run_id="r-demo", source="launcher", island=0, spec=_SPEC, handle="41234")
_RECIPE = {"train": {"model": "smollm2-135m", "max_steps": 20}, "limits": {"max_spend": 5.0}, "output": "", "recover_timeout_s": 600}
EXAMPLES = [
    RunLaunched(id="ex-run-launched", run_id="r-demo", source="launcher", fleet=[_SPEC], recipe=_RECIPE),
    IslandRequested(id="ex-island-requested", **_ISLAND),
    IslandUp(id="ex-island-up", **_ISLAND),
    IslandExited(id="ex-island-exited", exit_code=None, detail="process group gone without an exit status", **_ISLAND),
    IslandPreempted(id="ex-island-preempted", reason="killed (no exit status)", **_ISLAND),
    IslandReplaced(id="ex-island-replaced", **{**_ISLAND, "generation": 1, "handle": "41300"}, previous_generation=0),
    IslandDropped(id="ex-island-dropped", reason="not back within --recover-timeout 600s", **_ISLAND),
    IslandStopped(id="ex-island-stopped", **_ISLAND),
    FinalCutRequested(id="ex-final-cut-requested", run_id="r-demo", source="finalizer", reason="budget",
                      detail="spend $4.98 would pass --max-spend $5.00 within the next accounting period"),
    FinalCutDone(id="ex-final-cut-done", run_id="r-demo", source="syncer", versions={0: 12, 1: 12},
                 snapshot_path="/state/runs/r-demo/syncer/final.safetensors", sha256="0" * 64, keyframe_versions={0: 12, 1: 12}),
    CheckpointMarkedFinal(id="ex-checkpoint-marked-final", run_id="r-demo", source="finalizer", versions={0: 12, 1: 12},
                          snapshot_path="/state/runs/r-demo/syncer/final.safetensors", sha256="0" * 64),
    LearnerFinalAck(id="ex-learner-final-ack", run_id="r-demo", source="learner", learner="island-0", versions={0: 12, 1: 12}),
    ArtifactWritten(id="ex-artifact-written", run_id="r-demo", source="finalizer", output="/state/runs/r-demo/artifact",
                    local_path="/state/runs/r-demo/artifact", artifact_kind="adapter",
                    files=["adapter_config.json", "adapter_model.safetensors", "manifest.json"], manifest_sha256="1" * 64),
    RunFinalized(id="ex-run-finalized", run_id="r-demo", source="finalizer", output="/state/runs/r-demo/artifact",
                 manifest_sha256="1" * 64, reason="max_steps", spend_usd=0.0, acked=["island-0"], missing_acks=[]),
    RunFailed(id="ex-run-failed", run_id="r-demo", source="finalizer", reason="every island was dropped"),
    RunStopped(id="ex-run-stopped", run_id="r-demo", source="finalizer", reason="yeto down --now"),
    StartIsland(id="ex-start-island", run_id="r-demo", source="launcher", island=0, spec=_SPEC, recipe=_RECIPE, num_islands=2),
    StopIsland(id="ex-stop-island", run_id="r-demo", source="finalizer", island=0, spec=_SPEC),
    MarkFinal(id="ex-mark-final", run_id="r-demo", source="finalizer", versions={0: 12}, snapshot_path="/s/final", sha256="0" * 64),
    BuildArtifact(id="ex-build-artifact", run_id="r-demo", source="finalizer", recipe=_RECIPE, versions={0: 12}, acked=["island-0"]),
]
