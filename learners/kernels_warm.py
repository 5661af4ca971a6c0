"""The learner's compiled codec kernels made before its first push needs them.

A learner's q4 (or sparse) push runs numba kernels (schemas/codecs/: the encode with its error feedback, the decode
of the globals it applies) that compile on first use. With numba's cache empty (a fresh install or update: the README
quick start of every new user) that was inside the first step: 33.6 s at load 8-19 on 2 cores
(benchmarks/results/startup/README.md). Here every registered codec's encode, error-feedback encode and decode run
once on a throwaway array, either

- on a background thread of the learner itself, started before its model loads (`start`), the first push or apply
  waiting for it only if it is not done (`wait`, in DilocoSync), or
- in a child the zygote forks beside its own imports (`main`, once `prepare` made numba's CPU target in the zygote),
  which fills numba's on-disk cache; the forked ranks then load the kernels from it on their own thread, which first
  waits for that child's end (`after`: the zygote answers `ready` without waiting for it, so on an empty cache a rank
  builds its model and reads its data while the child compiles, instead of after; no rank compiles beside it). The zygote
  cannot hold them compiled itself: compiling, or loading from the cache, a `parallel=True` kernel starts numba's
  thread pool, and the zygote must run no thread when it forks. `python -m yeto.learners.kernels_warm` runs `main`
  alone.

Every codec, not only the run's: the learner does not know its run's codecs until it connects, after the model
loads, and all of them cost about what q4 alone does once the cache holds them (README's measurement).
"""
from __future__ import annotations

import logging
import os
import select
import threading
import time

import numpy as np

log = logging.getLogger("yeto.learner")

NUMEL = 3 * 65536 + 1000      # several of the kernels' pieces and a ragged tail, as the syncer's warm-up
_LOCK = threading.Lock()
AFTER_LIMIT_S = 600.0     # a sibling's compile that never ends: this process compiles what it lacks itself
_STATE: dict = {"thread": None, "after": None}


def warm() -> float:
    """Every registered codec's kernels made (compiled, or loaded from numba's cache) in this process; seconds."""
    from yeto.schemas import codecs
    started = time.monotonic()
    x = np.random.default_rng(0).standard_normal(NUMEL).astype(np.float32)
    for codec in codecs.CODECS.values():
        payload = codecs.ErrorFeedback(codec).encode(0, x)       # a push: encode, and decode into the residual
        codec.decode(bytes(payload), NUMEL)                      # a global applied: its payload as the bus hands it
    return time.monotonic() - started


def prepare() -> None:
    """numba's CPU target made ready without compiling or loading a kernel (what its dispatchers do first: the typing
    and lowering registries imported and installed, LLVM's code generator made; 0.1-0.4 s at load 1-9), so that a
    process forked after it does not do it again (learners/torch/zygote.py). Starts no thread."""
    from numba.core.registry import cpu_target

    from yeto.schemas import codecs  # noqa: F401 - numba's configuration as the codecs set it (cache, threading layer)
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


def after(fd: int) -> None:
    """A process forked from here on waits, before its warm-up, for the end of the one process holding the write end of
    this pipe (the zygote's warm-up child, filling numba's cache: its kernels then load, none compile twice)."""
    _STATE["after"] = fd


def _wait_for_sibling() -> None:
    if (fd := _STATE["after"]) is not None and select.select([fd], [], [], AFTER_LIMIT_S)[0]:
        os.read(fd, 1)          # EOF: the child ended (it writes nothing)


def start() -> threading.Thread:
    """`warm` on a daemon thread, once per process (a forked rank starts its own: threads do not cross a fork)."""
    with _LOCK:
        thread = _STATE["thread"]
        if thread is None:
            thread = _STATE["thread"] = threading.Thread(target=_run, name="learner-kernels", daemon=True)
            thread.start()
        return thread


def _run() -> None:
    try:
        _wait_for_sibling()
        log.info("codec kernels ready in %.1fs", warm())
    except Exception:       # a warm-up that fails leaves the first push to compile, as before
        log.exception("codec kernel warm-up failed")


def wait() -> None:
    """Block until a started warm-up is done (no-op where none was started)."""
    thread = _STATE["thread"]
    if thread is not None:
        thread.join()


def main() -> int:
    """The zygote's child: fill numba's on-disk cache, print the seconds."""
    print(f"codec kernels ready in {warm():.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
