"""Accelerator facts the planner needs: the GPU table (schemas/gpu_table.py) and the goodput model for spot islands."""
from __future__ import annotations

from yeto.schemas.gpu_table import GIB as GIB  # the planner's names for the shared table
from yeto.schemas.gpu_table import GPUS as GPUS
from yeto.schemas.gpu_table import GpuSpec as GpuSpec

# GPUs whose islands cannot run QLoRA (--base-quantization nf4): their image gets no bitsandbytes (the
# launcher installs the `gpu` extra, which brings it, on NVIDIA islands only; AMD islands run ROCm torch).
NO_NF4 = ("MI300X", "MI250X")

# Expected spot preemptions per island-hour without live signals (documented in docs/PLANNER.md): AWS's
# Spot Instance Advisor puts most GPU types in the 5-15 %/month-to-">20 %" buckets; GPU spot churns more
# than CPU spot, so these are deliberately pessimistic. Clouds with no spot market have no entry.
SPOT_PREEMPTIONS_PER_HOUR = {"aws": 0.05, "gcp": 0.08, "azure": 0.08, "runpod": 0.10, "vast": 0.15,
                             "oci": 0.08, "nebius": 0.08, "cudo": 0.10, "fluidstack": 0.10, "paperspace": 0.10}
DEFAULT_SPOT_PREEMPTIONS_PER_HOUR = 0.10
# Hours of island compute lost per preemption: replacement boot + model load + the local steps since the
# last push. DiLoCo islands never block each other, so only the preempted island loses time.
RECOVERY_HOURS = 0.25


def spot_goodput(cloud: str, *, placement_score: float | None = None) -> float:
    """Expected fraction of paid spot hours that train: 1 / (1 + preemptions/hour x hours lost each).

    A placement score (AWS, 1..10) scales the rate: 10 halves it, 1 doubles it, 5.5 leaves it.
    """
    rate = SPOT_PREEMPTIONS_PER_HOUR.get(cloud, DEFAULT_SPOT_PREEMPTIONS_PER_HOUR)
    if placement_score is not None:
        rate *= 2.0 ** ((5.5 - placement_score) / 4.5)
    return 1.0 / (1.0 + rate * RECOVERY_HOURS)
