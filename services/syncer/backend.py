"""The syncer's array backend: CuPy when a CUDA device is usable, NumPy otherwise, behind one module.

    from yeto.services.syncer.backend import xp, to_host, to_device, empty, zeros, GPU

On the host the hot loops (q4 decode and encode, the Gram-row fold, the outer step) are compiled kernels on a
pool of `set_threads(n)` threads (schemas/codecs/base.py; the syncer's `--threads`); `use_kernels("reference")`
puts the NumPy code they replaced back, for the benchmarks' side-by-side runs.
"""
from __future__ import annotations

import os

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.codecs.base import set_threads, threads, use_kernels

__all__ = ["GPU", "NAME", "copy_to_host", "decode_into", "empty", "host_buffer", "set_threads",
           "synchronize", "threads", "to_device", "to_host", "use_kernels", "xp", "zeros"]


def _load():
    choice = os.environ.get("YETO_SYNCER_BACKEND", "auto")
    if choice not in ("auto", "numpy", "cupy"):
        raise ValueError(f"YETO_SYNCER_BACKEND={choice!r}: use auto, numpy or cupy")
    if choice == "numpy":
        return np, False
    try:
        import cupy
        if cupy.cuda.is_available():
            return cupy, True
    except Exception:  # noqa: BLE001 - no cupy, or a broken CUDA install: the NumPy path is always correct
        pass
    if choice == "cupy":    # asked for by name, so not silently NumPy (an Ascend NPU host is the usual case)
        raise ValueError("YETO_SYNCER_BACKEND=cupy: CuPy's kernels need a CUDA device with cupy installed, and none is "
                         "usable here (an Ascend NPU host has none); unset it or set numpy: the NumPy merge is exact")
    return np, False


xp, GPU = _load()
NAME = "cupy" if GPU else "numpy"


def to_host(a) -> np.ndarray:
    """A NumPy array of `a` (a no-op on the NumPy backend)."""
    return a.get() if GPU and not isinstance(a, np.ndarray) else np.asarray(a)


def copy_to_host(a, out: np.ndarray) -> np.ndarray:
    """Copy `a` into the host array `out` (the device copies into it directly, no staging array); returns `out`."""
    if GPU and not isinstance(a, np.ndarray):
        return a.get(out=out)
    np.copyto(out, a)
    return out


def host_buffer(n: int) -> np.ndarray:
    """`n` float32 values of host memory for device copies: pinned on a GPU head, plain NumPy otherwise."""
    if GPU:
        import cupyx
        return cupyx.empty_pinned(n, dtype=np.float32)
    return np.empty(n, dtype=np.float32)


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


def decode_into(codec: codecs.Codec, payload: bytes | bytearray | memoryview, numel: int, out) -> None:
    """Decode a push's wire bytes into `out`, a row on the backend's device. On a GPU only the encoded bytes
    cross to the device (a q4 push is 1/8 of its f32 values) and the codec's `decode_on` runs there, the same
    arithmetic as its host decode, so the bits are the same (a NaN block decodes to NaN, CUDA's own). On NumPy,
    callers decode in place with the codec's `decode` (it feeds the Gram row while each stretch is in cache)."""
    codecs.check_size(codec, payload, numel)
    codec.decode_on(xp, to_device(np.frombuffer(payload, dtype=np.uint8)), numel, out)
