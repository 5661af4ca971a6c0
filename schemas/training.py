"""Events of the training area: merged and aborted rounds, rejected pushes, snapshots, learner progress."""
from __future__ import annotations

from typing import Any, Literal

from yeto.schemas.base import Event, registry
from yeto.schemas.progress import StepPoint

RejectReason = Literal[
    "fingerprint",          # the learner's layout fingerprint differs from the run's
    "replaced_generation",  # a newer generation of this learner id has been seen
    "duplicate",            # this push (learner, generation, fragment, local_step) was already taken
    "corrupt_chunk",        # a chunk's size or checksum is wrong
    "too_large",            # a declared size beyond the cap
    "bad_header",           # an unparsable header, or a numel that disagrees with the fragment
    "stale_base",           # base version older than max_base_lag versions
    "future_base",          # base version newer than the syncer's (the syncer lost state)
    "non_finite",           # the payload holds NaN or infinity
    "not_owned",            # this syncer instance does not own the fragment
    "init_mismatch",        # a learner's initial values differ from the adopted version 0
    "wrong_subject",        # the header's learner is not the learner of the subject it was published on
    "not_announced",        # the launcher has not announced this learner generation (IslandUp / IslandReplaced)
    "too_many_tokens",      # c_tokens or c_steps beyond what the recipe allows since the push's base version
    "norm_too_large",       # the push's norm beyond the bound relative to the fragment's (SyncConfig.max_push_norm_ratio)
    "evicted",              # a partial message dropped to keep pending bytes under their cap
    "unknown_run",          # no RunLaunched for the run came in time
]


@registry.register
class RoundMerged(Event):
    """A fragment's round merged: who contributed, how much, and what the outer step did."""

    type: Literal["RoundMerged"] = "RoundMerged"
    version: Literal[2] = 2
    fragment: int
    global_version: int             # the new global version of the fragment
    responders: list[str]           # learner ids, in merge order
    weights: list[float]            # normalised merge weights, one per responder
    staleness: list[int]            # current version - base version, per responder
    tokens: int                     # tokens merged for the first time (a push is credited only what no merged push carried)
    grace_ms: float                 # grace window granted once quorum was reached
    quorum_ms: float                # time from the round's first push to quorum
    merge_ms: float                 # time of the merge and outer step
    delta_norm: float               # L2 norm of the merged pseudo-gradient
    merge: str                      # rda | avg | avg-fallback (rda directions cancelled)
    momentum_cos: float | None = None   # v2: cos(delta, outer momentum b) before the step; None while either is zero
    momentum_restarted: bool = False    # v2: b was dropped before the step (momentum_restart = opposed, cos < 0)


@registry.upcaster("RoundMerged", 1)
def _round_merged_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "momentum_cos": None, "momentum_restarted": False}


@registry.register
class RoundAborted(Event):
    """A round's merge was abandoned all-or-nothing; the fragment keeps its previous version."""

    type: Literal["RoundAborted"] = "RoundAborted"
    version: Literal[1] = 1
    fragment: int
    global_version: int             # the version the fragment keeps
    responders: list[str]
    reason: str


@registry.register
class LearnerRejected(Event):
    """A push (or chunk) from a learner was refused; `reason` is a code, `detail` says what to fix."""

    type: Literal["LearnerRejected"] = "LearnerRejected"
    version: Literal[1] = 1
    learner: str
    generation: int = 0
    fragment: int | None = None
    reason: RejectReason
    detail: str = ""


@registry.register
class SnapshotWritten(Event):
    """The syncer's state for some fragments is durable at `path`."""

    type: Literal["SnapshotWritten"] = "SnapshotWritten"
    version: Literal[1] = 1
    path: str
    versions: dict[int, int]        # fragment -> global version in the snapshot
    sha256: str


@registry.register
class FragmentRestored(Event):
    """A syncer resumed a fragment from its snapshot. Snapshots are written after their broadcast, so versions
    past the snapshot's may have gone out (`published_version`); the restored values then resume as a version
    past them (`global_version` = published_version + 1, a keyframe), else as the snapshot's own version."""

    type: Literal["FragmentRestored"] = "FragmentRestored"
    version: Literal[1] = 1
    fragment: int
    snapshot_version: int
    published_version: int
    global_version: int


@registry.register
class LearnerJoined(Event):
    """The syncer saw a learner (generation) for the first time."""

    type: Literal["LearnerJoined"] = "LearnerJoined"
    version: Literal[1] = 1
    learner: str
    generation: int
    fingerprint: str


@registry.register
class LearnerProgress(Event):
    """A learner's training progress at a bounded rate: the newest step, and every step since the last report."""

    type: Literal["LearnerProgress"] = "LearnerProgress"
    version: Literal[3] = 3
    learner: str
    generation: int = 0
    step: int
    loss: float
    tokens: int                     # tokens processed since the learner started
    tokens_per_s: float
    step_time_s: float
    lr: float
    eval_loss: float | None = None  # v2: held-out loss after this step (TrainRecipe.eval_every), else None
    steps: list[StepPoint] = []     # v3: every step since the previous report, in order, this one last


@registry.upcaster("LearnerProgress", 1)
def _learner_progress_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "eval_loss": None}


@registry.upcaster("LearnerProgress", 2)
def _learner_progress_v2(data: dict[str, Any]) -> dict[str, Any]:
    """A v2 report held its newest step alone (its tokens_per_s the average since the start)."""
    point = {k: data.get(k) for k in ("step", "loss", "lr", "tokens_per_s", "step_time_s")}
    return {**data, "steps": [{**point, "tokens": 0}]}


@registry.register
class GlobalVersionPublished(Event):
    """A new global version of a fragment was broadcast (as a delta, and a keyframe when `keyframe`)."""

    type: Literal["GlobalVersionPublished"] = "GlobalVersionPublished"
    version: Literal[1] = 1
    fragment: int
    global_version: int
    keyframe: bool
    num_bytes: int


EXAMPLES = [
    RoundMerged(id="ex-round-merged", run_id="r-demo", source="syncer", fragment=3, global_version=12, responders=["l0", "l1"],
                weights=[0.5, 0.5], staleness=[0, 1], tokens=49152, grace_ms=180.0, quorum_ms=40.0, merge_ms=3.5,
                delta_norm=0.042, merge="rda", momentum_cos=0.31),
    RoundAborted(id="ex-round-aborted", run_id="r-demo", source="syncer", fragment=3, global_version=12, responders=["l0", "l1"],
                 reason="non-finite merge result"),
    LearnerRejected(id="ex-learner-rejected", run_id="r-demo", source="syncer", learner="l2", generation=1, fragment=0,
                    reason="fingerprint", detail="layout fingerprint 9f2c... differs from the run's 41aa...; "
                                                  "start the learner with the run's model and tuning"),
    SnapshotWritten(id="ex-snapshot-written", run_id="r-demo", source="syncer", path="/state/r-demo/syncer/frag-3.safetensors",
                    versions={3: 12}, sha256="0" * 64),
    FragmentRestored(id="ex-fragment-restored", run_id="r-demo", source="syncer", fragment=3, snapshot_version=11,
                     published_version=12, global_version=13),
    LearnerJoined(id="ex-learner-joined", run_id="r-demo", source="syncer", learner="l0", generation=0, fingerprint="41aa" * 16),
    LearnerProgress(id="ex-learner-progress", run_id="r-demo", source="learner", learner="l0", step=120, loss=2.31,
                    tokens=245760, tokens_per_s=2048.0, step_time_s=1.0, lr=3e-4, eval_loss=2.4,
                    steps=[StepPoint(step=119, loss=2.35, lr=3e-4, tokens=2048, tokens_per_s=2040.0, step_time_s=1.004,
                                     grad_norm=0.91),
                           StepPoint(step=120, loss=2.31, lr=3e-4, tokens=2048, tokens_per_s=2048.0, step_time_s=1.0,
                                     grad_norm=0.88)]),
    GlobalVersionPublished(id="ex-global-version-published", run_id="r-demo", source="syncer", fragment=3, global_version=12,
                           keyframe=False, num_bytes=1056),
]
