"""What a learner says about its own training: every optimizer step's metrics (StepPoint, batched into
LearnerProgress) and, once per generation, how it runs (LearnerStarted)."""
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


EXAMPLES = [
    LearnerStarted(id="ex-learner-started", run_id="r-demo", source="l0", learner="l0", backend="torch", ranks=2,
                   shard="FSDP2", tuning="lora", dtype="bfloat16", quantization="none", device="cuda",
                   trainable=1_081_344, parameters=135_596_352),
]
