"""One optimizer step of an island as every learner backend reports it (torch, diffusion, MLX): torch-free."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """One optimizer step of the island, as reported to progress events and benchmarks."""

    step: int
    """Optimizer steps done (1 after the first)."""
    loss: float
    """Mean loss per unit of weight (labelled token, image) over the island's global batch."""
    tokens: int
    """The step's DiLoCo weight: labelled tokens in the island's global batch (images for diffusion)."""
    seconds: float
    """Wall time of the step, sync boundary included."""
    lr: float
    """Learning rate used."""
    synced: bool
    """Whether the sync boundary changed the parameters (a global version applied)."""
    grad_norm: float | None = None
    """The gradients' total norm before clipping."""
    eval_loss: float | None = None
    """Held-out loss measured after this step (the recipe's eval_every), else None."""
