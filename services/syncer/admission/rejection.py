"""Why a message was refused: what every admission stage returns, and what a LearnerRejected event carries."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rejection:
    reason: str                     # a schemas.training.RejectReason code
    detail: str
