"""The syncer's array backend: CuPy when a CUDA device is usable, NumPy otherwise, behind one module.

    from yeto.services.syncer.backend import xp, to_host, to_device, empty, zeros, GPU
"""
from __future__ import annotations

import os

import numpy as np


def _load():
    if os.environ.get("YETO_SYNCER_BACKEND", "auto") == "numpy":
        return np, False
    try:
        import cupy
        if cupy.cuda.is_available():
            return cupy, True
    except Exception:  # noqa: BLE001 - no cupy, or a broken CUDA install: the NumPy path is always correct
        pass
    return np, False


xp, GPU = _load()
NAME = "cupy" if GPU else "numpy"


def to_host(a) -> np.ndarray:
    """A NumPy array of `a` (a no-op on the NumPy backend)."""
    return a.get() if GPU and not isinstance(a, np.ndarray) else np.asarray(a)


def to_device(a: np.ndarray):
    """`a` on the backend's device (a no-op on the NumPy backend)."""
    return xp.asarray(a)


def empty(n: int, dtype=np.float32):
    return xp.empty(n, dtype=dtype)


def zeros(n: int, dtype=np.float32):
    return xp.zeros(n, dtype=dtype)


def synchronize() -> None:
    """Wait for queued device work (timing and before host reads); nothing to do on NumPy."""
    if GPU:
        xp.cuda.Device().synchronize()
