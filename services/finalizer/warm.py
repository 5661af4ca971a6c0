"""The artifact writer's libraries imported while a run trains, so that its end does not wait on them.

The first artifact a finalizer process writes imports torch, transformers, peft, safetensors and huggingface_hub
(diffusers too for a diffusion run): 3.2-3.3 CPU s and 4.8-6.6 s of wall time for a tiny LoRA adapter in a fresh
process at load 6, against 0.03 CPU s and 0.05 s once they are imported (2026-12-06, one run each alternating, a /tmp
script: write_artifact in a fresh process with and without the imports first). The user waits on that write at the
end of every run (`yeto launch --wait`, the quick start). So once a run this finalizer follows is training and has
merged a round (its learners are past their own start, which competes for the same cores on a local stack), the
imports run on a thread at the lowest priority, once per process and kind of run; the write then finds them done.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from yeto.infra.runner import Context

log = logging.getLogger(__name__)

POLL_S = 1.0
MODULES = {"lm": ("torch", "safetensors.numpy", "transformers", "peft", "huggingface_hub"),
           "diffusion": ("torch", "safetensors.torch", "transformers", "peft", "huggingface_hub", "diffusers")}
"""What the artifact writer (artifact.py, diffusion_artifact.py, card.py) imports, by the kind of run."""


def kinds_due(state: dict[str, Any]) -> set[str]:
    """The kinds of run ("lm", "diffusion") that are training here and have merged a round."""
    return {"diffusion" if run.view.recipe.get("model_kind") == "diffusion" else "lm"
            for run in state.values() if run.phase == "training" and run.view.rounds_merged > 0 and not run.view.ended}


def import_all(names: tuple[str, ...]) -> float:
    """Import `names` (on a thread); the CPU seconds it took this thread. The thread runs at the lowest priority
    (nice 19, its own: Linux sets it per thread), so on a machine the learners share (a local stack) it takes only
    cycles they leave; on a head of its own it runs at once."""
    with contextlib.suppress(AttributeError, OSError):       # no per-thread priority here (macOS): as it is
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    started = time.thread_time()
    with lowest_group_priority():
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - the write imports it again and says what is missing there
                log.warning("warming the artifact's libraries: %s not imported (%s)", name, e)
    return time.thread_time() - started


AUTOGROUP = Path("/proc/self/autogroup")


@contextlib.contextmanager
def lowest_group_priority() -> Iterator[None]:
    """Linux's autogroup scheduling shares the CPU between sessions first and applies a thread's nice only within its
    session: the finalizer is a session of its own, so a nice 19 thread still took its session's fair share from the
    learners beside it (wan.py at 20 Mbit/s, 3 seeds: their steps 2.5x slower while it imported, time to target +20%).
    While the imports run, the finalizer's session gets the lowest weight (nice 19), then its own again."""
    try:
        before = AUTOGROUP.read_text().split("nice")[-1].strip()
        AUTOGROUP.write_text("19")
    except (OSError, ValueError):
        yield                       # no autogroup (disabled, not Linux): the thread's own nice is what there is
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            AUTOGROUP.write_text(before)


async def warm_artifact_imports(ctx: Context) -> None:
    """The finalizer's background job: import what a run's artifact needs once that run trains (the module docstring)."""
    done: set[str] = set()
    while not ctx.stop.is_set():
        if ctx.live and isinstance(ctx.state, dict):
            for kind in sorted(kinds_due(ctx.state) - done):
                done.add(kind)
                cpu_s = await asyncio.to_thread(import_all, MODULES[kind])
                log.info("imported the %s artifact's libraries ahead of its write (%.2f CPU s)", kind, cpu_s)
            if done >= set(MODULES):
                return
        try:
            await asyncio.wait_for(ctx.stop.wait(), POLL_S)
        except asyncio.TimeoutError:
            pass
