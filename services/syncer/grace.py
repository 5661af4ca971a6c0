"""Quorum size and the adaptive grace window (Decoupled DiLoCo Eq. 3), as pure functions of measured times."""
from __future__ import annotations


def quorum_size(num_live: int, quorum: int | None) -> int:
    """K = min(quorum, live learners); the default quorum is a majority of the live learners; at least 1."""
    wanted = num_live // 2 + 1 if quorum is None else quorum
    return max(1, min(wanted, num_live))


def grace_s(*, slowest_step_s: float, quorum_s: float, sync_s: float, gamma: float, tau_steps: float,
            grace_max_s: float) -> float:
    """grace = clamp(gamma * (tau * xi_step - xi_quorum - xi_sync), 0, grace_max).

    The budget is tau inner steps of the slowest live learner; what reaching quorum and the last sync
    already spent comes off it, so a slow round waits less for stragglers."""
    return min(max(gamma * (tau_steps * slowest_step_s - quorum_s - sync_s), 0.0), grace_max_s)


def ema(previous: float | None, sample: float, decay: float) -> float:
    """Exponential moving average; the first sample starts it."""
    return sample if previous is None else decay * previous + (1.0 - decay) * sample
