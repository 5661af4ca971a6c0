"""The syncer's compiled kernels made before a run's first round needs them.

The decode-and-fold, merge, outer-step and broadcast-encode kernels (numba, merge.py, gram.py, sparse.py and the
codecs) compile on first use: on a head whose kernel cache is empty (a fresh VM, a new release) that was the run's
first round, ~10 s of it on 2 loaded cores, and the second round's kernels as long again, while the learners trained
on and piled up pushes that were then refused as stale (benchmarks/results/wan/unanswered/, seed 0). When the syncer
learns of a run, it puts one throwaway round with the run's codecs through a SyncerCore of its own on a thread,
while the learners are still loading their models; a cache that holds the kernels makes it cost milliseconds.
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.core import SyncerCore

log = logging.getLogger("yeto.syncer")

NUMEL = 3 * 65536 + 1000     # several of the kernels' pieces and a ragged tail
ROLES = ("layers", "embed")
_LOCK = threading.Lock()
_DONE: set[tuple[str, str]] = set()          # pairs of codecs whose warm-up started in this process
_READY: set[tuple[str, str]] = set()         # ... and ended (made, or failed: then the first round compiles)


def warm(sync: dict) -> float:
    """Two rounds of two pushes and their broadcasts, with `sync`'s codecs, on a layers fragment and an embed one
    (merged by plain average), through a core no run sees; seconds taken."""
    started = time.monotonic()
    config = SyncConfig.from_dict({**sync, "num_fragments": 2, "quorum": 2, "snapshot_every": 1_000_000})
    core = SyncerCore(config, run_id="warm-up", source="warm-up")
    rng = np.random.default_rng(0)
    up = codecs.codec(config.codec_up)
    for p, role in enumerate(ROLES):
        send(core, header(codecs.F32, "w0", "init", p, role), codecs.F32.encode(rng.standard_normal(NUMEL).astype(np.float32)))
    for round_ in range(2):           # the first round and one after it (a delta broadcast, momentum non-zero)
        for p, role in enumerate(ROLES):
            for m in range(2):
                d = (1e-3 * rng.standard_normal(NUMEL)).astype(np.float32)
                send(core, header(up, f"w{m}", "push", p, role, base=round_, step=round_ + 1), up.encode(d))
        core.tick(time.monotonic())
    return time.monotonic() - started


def header(codec: codecs.Codec, learner: str, kind: str, fragment: int, role: str, *, base: int = 0,
           step: int = 0) -> FragmentHeader:
    return FragmentHeader(run_id="warm-up", learner=learner, fragment=fragment, kind=kind, role=role, base_version=base,
                          local_step=step, c_steps=1 if kind == "push" else 0, c_tokens=100 if kind == "push" else 0,
                          tokens_to=100 * step, fingerprint="warm-up", codec=codec.name, numel=NUMEL)


def send(core: SyncerCore, h: FragmentHeader, payload: bytes) -> None:
    for chunk_header, chunk in split_chunks(h, payload):
        core.receive(chunk_header, chunk, time.monotonic())


def _key(sync: dict) -> tuple[str, str]:
    return str(sync.get("codec_up", SyncConfig.codec_up)), str(sync.get("codec_down", SyncConfig.codec_down))


def ready(sync: dict) -> bool:
    """False while a warm-up for `sync`'s codecs runs in this process (its compiles hold the GIL: the syncer's
    loop crawls meanwhile); True once it ended, or where none was started."""
    key = _key(sync)
    with _LOCK:
        return key in _READY or key not in _DONE


def start(sync: dict) -> threading.Thread | None:
    """Warm the kernels for `sync`'s codecs on a daemon thread, once per pair of codecs in this process."""
    key = _key(sync)
    with _LOCK:
        if key in _DONE:
            return None
        _DONE.add(key)

    def run() -> None:
        try:
            log.info("kernels for codecs %s/%s ready in %.1fs", *key, warm(sync))
        except Exception:       # a warm-up that fails leaves the first round to compile, as before
            log.exception("kernel warm-up for codecs %s/%s failed", *key)
        finally:
            with _LOCK:
                _READY.add(key)
    thread = threading.Thread(target=run, name="syncer-warm-up", daemon=True)
    thread.start()
    return thread
