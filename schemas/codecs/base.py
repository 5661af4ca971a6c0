"""The `Codec` protocol every wire codec implements, and what codecs share: the size check, a host decode, a kernel pool.

The pool is where the compiled (numba) kernels of the codecs and the syncer run.
The kernels split an array into fixed chunks over `threads()` threads and release the GIL. Parallel calls are
serialized by one lock (numba's workqueue layer, chosen here because it is fork-safe, must not be entered by two
threads at once), and results never depend on the thread count: elementwise kernels give the same bits anyway,
and a reduction sums per-chunk partials in chunk order. `use_kernels("reference")` switches the host back to the
NumPy code the kernels replaced (the benchmarks compare the two in one run; the tests check they agree).
"""
from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Protocol, TypeVar

import numba
import numpy as np
from numba.misc.appdirs import AppDirs

Payload = bytes | bytearray | memoryview


def writable(folder: str) -> bool:
    """Whether numba could keep its cache files in `folder` (made if missing), as its cache locators test it."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def numba_cache_dir(package_dir: str, user_dir: str, home: str) -> str | None:
    """Where the kernels' `cache=True` files go when numba's own choices fail: None while the package's __pycache__
    (a source tree, a writable site-packages) or numba's per-user folder (~/.cache/numba: a read-only site-packages)
    is writable, both kept across state directories; else `home`/cache/numba (without it numba refuses to define a
    cached kernel at all, and every import of the codecs would fail)."""
    if writable(os.path.join(package_dir, "__pycache__")) or writable(user_dir):
        return None
    return os.path.join(home, "cache", "numba")


_numba: Any = numba.config
_dirs: Any = AppDirs
if not _numba.CACHE_DIR:      # NUMBA_CACHE_DIR unset; read when each kernel below is defined
    _numba.CACHE_DIR = numba_cache_dir(
        os.path.dirname(os.path.abspath(__file__)), _dirs(appname="numba", appauthor=False).user_cache_dir,
        os.environ.get("YETO_HOME") or os.path.join(os.path.expanduser("~"), ".yeto")) or ""
OnChunk = Callable[[int, int], None]


class Codec(Protocol):
    """One payload encoding of 1-D f32 values. Host and device decodes give the same bits for the same bytes."""

    name: str
    """The protocol id: the `codec` a FragmentHeader and a SyncConfig carry."""
    error_feedback: bool
    """Whether a sender keeps what encoding lost and adds it to its next payload (schemas/codecs/feedback.py)."""

    def encoded_size(self, numel: int) -> int:
        """Bytes of the encoded payload of `numel` values."""
        ...

    def encode(self, x: np.ndarray) -> bytes:
        """The wire bytes of a 1-D f32 array."""
        ...

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        """A 1-D f32 array of `numel` values (written into `out` when given). `on_chunk(start, stop)` is called as
        each stretch of `out` is written, while it is still in cache. ValueError on a payload of the wrong size."""
        ...

    def decode_on(self, xp: ModuleType, raw: Any, numel: int, out: Any) -> None:
        """Decode into `out` on the device of array module `xp` (numpy or cupy), `raw` the payload's uint8 array
        there: only the encoded bytes cross to the device. ValueError on a payload of the wrong size."""
        ...


def check_size(codec: Codec, payload: Any, numel: int) -> None:
    """ValueError unless `payload` (bytes or a 1-D uint8 array) is exactly the encoded size of `numel` values."""
    if len(payload) != codec.encoded_size(numel):
        raise ValueError(f"{codec.name} payload of {numel} values must be {codec.encoded_size(numel)} bytes, "
                         f"got {len(payload)}")


def decode_whole(codec: Codec, payload: Payload, numel: int, out: np.ndarray | None, on_chunk: OnChunk | None) -> np.ndarray:
    """`codec.decode` for a codec whose one vectorized pass over NumPy is its host decode: its `decode_on`."""
    check_size(codec, payload, numel)
    out = np.empty(numel, dtype=np.float32) if out is None else out
    codec.decode_on(np, np.frombuffer(payload, dtype=np.uint8), numel, out)
    if on_chunk is not None:
        on_chunk(0, numel)
    return out


def encode_delta(codec: Codec, theta: np.ndarray, shadow: np.ndarray) -> Payload:
    """The payload of `theta - shadow`, with `shadow += decode(payload)` done in place: a broadcast's step. A codec
    with its own `encode_delta` (q4: one fused pass into a reused buffer, a read-only memoryview) gives the same bytes
    and bits as this."""
    one_pass = getattr(codec, "encode_delta", None) if fused() else None
    if one_pass is not None:
        return one_pass(theta, shadow)  # type: ignore[no-any-return]
    payload = codec.encode(theta - shadow)
    shadow += codec.decode(payload, shadow.size)
    return payload


# A dot product summed in float64 (each f32 product exact there), vectorized: on 1-D slices, its own function (inlined,
# the slices' possible overlap keeps it scalar); reassociation only reorders this slice's sum, fixed per build. The Gram
# row (services/syncer/gram.py) and a decode fused with it (q4 `decode_fold`) call this one, so they agree bit for bit.
@numba.njit(nogil=True, cache=True, inline="never", fastmath={"reassoc", "contract"})
def dot64(a: Any, b: Any) -> float:  # pragma: no cover - compiled
    acc = 0.0
    for i in range(a.size):
        acc += np.float64(a[i]) * np.float64(b[i])
    return acc


_config: Any = numba.config
if _config.THREADING_LAYER == "default":          # NUMBA_THREADING_LAYER, when set, wins
    _config.THREADING_LAYER = "workqueue"
KERNELS = ("reference", "separate", "compiled")
_pool: dict[str, Any] = {"threads": os.cpu_count() or 1, "kernels": "compiled"}
_lock = threading.Lock()


def set_threads(num_threads: int) -> None:
    """How many threads the compiled kernels use in this process (default: every core). ValueError below 1."""
    if num_threads < 1:
        raise ValueError(f"threads must be at least 1, got {num_threads}")
    _pool["threads"] = num_threads


def threads() -> int:
    return int(_pool["threads"])


def use_kernels(name: str) -> None:
    """"compiled" (numba, fused passes: the default), "separate" (the same kernels one pass each, as before the
    fused broadcast, decode-with-fold and parallel hashing of 2026-12-05) or "reference" (the NumPy code the kernels
    replaced). The three give the same bytes; the benchmarks compare them in one run."""
    if name not in KERNELS:
        raise ValueError(f"kernels {name!r}: use one of {', '.join(KERNELS)}")
    _pool["kernels"] = name


def compiled() -> bool:
    return bool(_pool["kernels"] != "reference")


def fused() -> bool:
    """Whether the fused passes run (kernels "compiled"): one pass where "separate" makes two or three."""
    return bool(_pool["kernels"] == "compiled")


@contextmanager
def pool() -> Iterator[None]:
    """Around one parallel kernel call: one call at a time, on `threads()` threads (numba's count is per thread)."""
    with _lock:
        numba.set_num_threads(min(threads(), int(_config.NUMBA_NUM_THREADS)))
        yield


T = TypeVar("T")
R = TypeVar("R")
_spreaders: list[ThreadPoolExecutor] = []
_spread_lock = threading.Lock()
_spreading = {"on": True}


def spread_on(on: bool) -> None:
    """Whether `spread` uses the kernel threads (the default) or calls everything on the calling thread, as the round's
    steps that use it (the broadcast's chunks, a kept push's copy, Θ's norm for admission) did before 2026-12-06:
    benchmarks/round.py --spread on,off compares the two in one run."""
    _spreading["on"] = bool(on)


def spreading() -> bool:
    return _spreading["on"]


def spread(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """[fn(x) for x in items] on `threads()` threads, the calling thread one of them: the items in as many runs of
    neighbours, each run's calls in order on one thread, the results in the items' order. For calls that release the
    GIL (hashlib over more than 2 KiB, NumPy's copies between byte arrays); with one thread (or one item) it is that
    loop on the calling thread. An exception is raised here once every run is done."""
    count = min(threads(), len(items)) if _spreading["on"] else 1
    if count <= 1:
        return [fn(x) for x in items]
    bounds = [len(items) * i // count for i in range(count + 1)]

    def run(i: int) -> list[R]:
        return [fn(x) for x in items[bounds[i]:bounds[i + 1]]]

    workers = _spreader(count - 1)
    others = [workers.submit(run, i) for i in range(1, count)]
    try:
        out = run(0)
    finally:
        done = [f.exception() for f in others]          # every run finished before anything is raised or returned
    for f, error in zip(others, done, strict=True):
        if error is not None:
            raise error
        out += f.result()
    return out


def _spreader(workers: int) -> ThreadPoolExecutor:
    """The process's pool for `spread`, at least `workers` threads (made again, larger, when more are asked for)."""
    with _spread_lock:
        if not _spreaders or _spreaders[0]._max_workers < workers:
            old = _spreaders[:1]
            _spreaders[:] = [ThreadPoolExecutor(max_workers=workers, thread_name_prefix="yeto-spread")]
            for pool_ in old:
                pool_.shutdown(wait=False)
        return _spreaders[0]
