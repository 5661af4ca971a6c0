"""Timers on the steps of a syncer round, for benchmarks/round_profile.py: exclusive wall time per step, by call path.

    profiling.instrument()          # once: wraps the round's steps where their callers look them up
    profiling.TOTALS.clear(); ...   # run a round; TOTALS["receive/take/reassembly/sha256"] is seconds

Each timer counts its own time less the timers inside it, under the path of the timed calls around it, so the
entries of one round add up to the time spent inside the outermost timed calls. Only the main thread is timed:
calls from other threads (the snapshot writer beside the round) run untimed.
Nothing in the service calls this; it changes the module and class attributes it wraps for the process's life.
"""
from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from yeto.schemas import codecs, fragments
from yeto.services.syncer import admission, broadcast, core, fragment, gram, intake, merge, outputs

TOTALS: dict[str, float] = defaultdict(float)
_local = threading.local()
_done: list[bool] = []


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` counting its exclusive wall time under the path of the timed calls around it (main thread only)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        stack = _local.__dict__.setdefault("stack", [])
        path = "/".join([*(s[0] for s in stack), name])
        stack.append([name, 0.0])
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - start
            _, inner = stack.pop()
            TOTALS[path] += spent - inner
            if stack:
                stack[-1][1] += spent
    return wrapper


def _patch(owner: Any, attr: str, name: str | None = None) -> None:
    setattr(owner, attr, timed(name or attr, getattr(owner, attr)))


def instrument() -> None:
    """Wrap each step of a round where its caller looks it up (a module global or a class attribute); once."""
    if _done:
        return
    _done.append(True)
    _patch(core.SyncerCore, "receive")
    _patch(intake.Intake, "take")
    for stage in ("chunk", "push", "bounded", "decoded"):
        _patch(admission, stage, f"admission.{stage}")
    _patch(fragments.ChunkAssembler, "add", "reassembly")
    for owner in (fragments, broadcast, outputs):
        if hasattr(owner, "sha256"):
            _patch(owner, "sha256")
    _patch(fragment.FragmentState, "take_in")
    _patch(fragment.FragmentState, "add", "round.add")
    for codec in {type(c) for c in codecs.CODECS.values()}:
        _patch(codec, "decode", f"{codec.__name__}.decode")
        _patch(codec, "encode", f"{codec.__name__}.encode")
        if hasattr(codec, "encode_delta"):
            _patch(codec, "encode_delta", f"{codec.__name__}.encode_delta")
    _patch(gram.RowProducts, "__call__", "gram_row")
    _patch(gram, "gram_pass")
    _patch(fragment.FragmentState, "merge")
    _patch(merge, "outer_step")
    _patch(fragment.FragmentState, "publish")
    _patch(fragment.FragmentState, "snapshot", "snapshot_copy")
    _patch(outputs, "split_chunks")
    _patch(outputs, "broadcast_chunks")
