"""The artifact writer's libraries imported while a run trains, so that its end does not wait on them.

The first artifact a process writes imports torch, transformers, peft, safetensors and huggingface_hub (diffusers too
for a diffusion run): 3.2-3.3 CPU s and 4.8-6.6 s of wall time for a tiny LoRA adapter in a fresh process at load 6,
against 0.03 CPU s and 0.05 s once they are imported (2026-12-06, one run each alternating, a /tmp script:
write_artifact in a fresh process with and without the imports first). The user waits on that write at the end of
every run (`yeto launch --wait`, the quick start). So once a run this finalizer follows is training and has merged a
round (its learners are past their own start, which competes for the same cores on a local stack), its artifact
writer (writer.py, a process of its own at the lowest weight) imports them, once per kind of run; the write then
finds them done.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from yeto.infra.runner import Context
from yeto.services.finalizer.writer import Writer, WriterError

log = logging.getLogger(__name__)

POLL_S = 1.0


def kinds_due(state: dict[str, Any]) -> set[str]:
    """The kinds of run ("lm", "diffusion") that are training here and have merged a round."""
    return {"diffusion" if run.view.recipe.get("model_kind") == "diffusion" else "lm"
            for run in state.values() if run.phase == "training" and run.view.rounds_merged > 0 and not run.view.ended}


async def warm_artifact_imports(ctx: Context, writer: Writer) -> None:
    """The finalizer's background job: have its writer import what a run's artifact needs once that run trains (the
    module docstring); the writer stops with the service."""
    done: set[str] = set()
    try:
        while not ctx.stop.is_set():
            if ctx.live and isinstance(ctx.state, dict):
                for kind in sorted(kinds_due(ctx.state) - done):
                    done.add(kind)
                    try:
                        cpu_s = await writer.warm(kind)
                    except WriterError as e:   # it is started again for the write, which says what went wrong
                        log.warning("the artifact writer did not import the %s libraries: %s", kind, e)
                        continue
                    log.info("imported the %s artifact's libraries ahead of its write (%.2f CPU s, pid %s)", kind,
                             cpu_s, writer.pid)
            try:
                await asyncio.wait_for(ctx.stop.wait(), POLL_S)
            except asyncio.TimeoutError:
                pass
    finally:
        await writer.close()
