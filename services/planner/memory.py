"""The memory model, now in schemas/memory_model.py (pure, so the launcher checks a LaunchRun against it too):
the planner's names for it."""
from __future__ import annotations

from yeto.schemas.memory_model import BYTES_PER_PARAM, Need, Workload, fits, per_gpu_need, shape_of

__all__ = ["BYTES_PER_PARAM", "Need", "Workload", "fits", "per_gpu_need", "shape_of"]
