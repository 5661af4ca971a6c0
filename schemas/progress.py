"""What a learner says about its own training: every optimizer step's metrics (StepPoint, batched into
LearnerProgress), once per generation how it runs (LearnerStarted), and while a held-out evaluation runs, that it
advances (LearnerBeat)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from yeto.schemas.base import Event, registry

MAX_STEPS_PER_REPORT = 256
"""Steps one LearnerProgress carries at most (~40 KB of JSON, far under the tape's 4 MiB cap per event): a learner
faster than that per report interval sends a report as soon as it holds this many."""


class StepPoint(BaseModel):
    """One optimizer step of an island, as the tape keeps it (learners/step.py's StepResult)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    step: int
    loss: float
    lr: float
    tokens: int                     # the step's labelled tokens (images for diffusion) over the island
    tokens_per_s: float             # this step's tokens over its own wall time
    step_time_s: float              # the step's wall time, sync boundary included
    grad_norm: float | None = None  # the gradient norm before clipping (None where the backend does not clip)


@registry.register
class LearnerStarted(Event):
    """How a learner generation runs, published once after its model is built (its first log line says the same)."""

    type: Literal["LearnerStarted"] = "LearnerStarted"
    version: Literal[1] = 1
    learner: str
    generation: int = 0
    backend: str                    # torch, mlx, diffusion
    ranks: int                      # processes in the island
    shard: str                      # fsdp2, ddp or none
    tuning: str                     # lora, qlora, full
    dtype: str                      # compute dtype
    quantization: str               # the base's quantization (none, nf4, ...)
    device: str                     # cuda, cpu, mps, npu, ...
    trainable: int                  # trainable parameters
    parameters: int                 # all parameters


@registry.register
class LearnerBeat(Event):
    """A learner's held-out evaluation advanced: sent after an evaluated batch, at most once per report interval.

    An evaluation reports no step, so one of minutes (the final one after max_steps above all) was silence the
    launcher took for a frozen island (services/launcher/liveness.py). A batch, not a timer, sends it, so a hung
    evaluation stays silent and is still preempted."""

    type: Literal["LearnerBeat"] = "LearnerBeat"
    version: Literal[1] = 1
    learner: str
    generation: int = 0
    step: int                       # the last optimizer step trained (the evaluation is of the model after it)
    batches_done: int               # held-out batches evaluated so far in this evaluation
    batches: int                    # held-out batches this evaluation has in all
    final: bool                     # the evaluation after training ended (max_steps reached, the final pushes sent)


EXAMPLES = [
    LearnerStarted(id="ex-learner-started", run_id="r-demo", source="l0", learner="l0", backend="torch", ranks=2,
                   shard="FSDP2", tuning="lora", dtype="bfloat16", quantization="none", device="cuda",
                   trainable=1_081_344, parameters=135_596_352),
    LearnerBeat(id="ex-learner-beat", run_id="r-demo", source="l0", learner="l0", step=1200, batches_done=5, batches=16,
                final=True),
]
