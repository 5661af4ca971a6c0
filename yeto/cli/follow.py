"""Follow one run's events from its first and print a live progress line per event worth a human's attention."""
from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

from yeto.infra.bus import Delivery, connect
from yeto.schemas.artifact_layout import deploy_prefix, is_resume_file
from yeto.schemas.base import SchemaError, parse
from yeto.schemas.refusal_view import printable
from yeto.schemas.subjects import run_events

TERMINAL = {"RunFinalized": 0, "RunFailed": 1, "RunStopped": 1}


class Progress:
    """Renders events as lines; LearnerProgress, and a final evaluation's LearnerBeat, at most once per `every_s` per
    learner."""

    def __init__(self, every_s: float = 5.0):
        self.every_s, self.rounds = every_s, 0
        self.last: dict[object, float] = {}    # per learner (or learner and reason): when last printed

    def line(self, e) -> str | None:
        t = e.type
        if t == "LearnerProgress":
            now = time.monotonic()
            if now - self.last.get(e.learner, -1e9) < self.every_s:
                return None
            self.last[e.learner] = now
            return (f"  {e.learner} g{e.generation}: step {e.step} loss {e.loss:.4f} ({e.tokens_per_s:.0f} tok/s), "
                    f"rounds merged {self.rounds}")
        if t == "LearnerBeat" and e.final:     # minutes of it after the last step would show as nothing
            now, key = time.monotonic(), (e.learner, t)
            if now - self.last.get(key, -1e9) < self.every_s:
                return None
            self.last[key] = now
            return f"  {e.learner} g{e.generation}: final evaluation, {e.batches_done}/{e.batches} held-out batches"
        if t == "RoundMerged":
            self.rounds += 1
            return None
        if t == "LearnerRejected":      # a refused learner is refused at every push: say so once per period
            now, key = time.monotonic(), (e.learner, e.reason)
            if now - self.last.get(key, -1e9) < self.every_s:
                return None
            self.last[key] = now
            return f"  {e.learner} g{e.generation} refused ({e.reason}): {e.detail}"
        if t == "OfferRefused":      # the cloud's words are untrusted: printable() (schemas/refusal_view.py)
            if (t, e.island, e.generation) in self.last:      # a retried start refused again: told once
                return None
            self.last[(t, e.island, e.generation)] = time.monotonic()
            return (f"  island {e.island} g{e.generation}: {e.cloud} {e.region or '(any region)'} {e.count}x{e.gpu} "
                    f"refused ({e.cause}: {printable(e.reason, 120)}); the planner looks for the next-best offer")
        if t == "ReplanFailed":
            return f"  island {e.island} g{e.generation}: no offer can take its place: {printable(e.reason, 400)}; {e.advice}."
        if t.startswith("Island"):
            extra = getattr(e, "reason", "") or getattr(e, "detail", "")
            return f"  island {e.island} g{e.generation}: {t[len('Island'):].lower()}" + (f" ({extra})" if extra else "")
        if t == "FinalCutRequested":
            return f"final cut requested: {e.reason} ({e.detail})"
        if t in ("FinalCutDone", "CheckpointMarkedFinal"):
            return f"{t}: versions {dict(e.versions)}"
        if t == "ArtifactWritten":       # the output folder's layout: schemas/artifact_layout.py
            nested = bool(deploy_prefix(e.files)) and not e.output.startswith("hf://")
            local = "://" not in e.output       # --resume-from reads a local folder (a store's: copy it first)
            return f"artifact ({e.artifact_kind}) written to {e.output}" + (
                f": deploy {e.output}/artifact (its README.md says how)" if nested else "") + (
                f", resume from {e.output}" if nested and local and any(map(is_resume_file, e.files)) else "")
        if t == "RunFinalized":
            return closing_sentence(e)
        if t in ("RunFailed", "RunStopped", "MessageRejected", "RunLaunched", "RoundAborted"):
            return f"{t}: {getattr(e, 'reason', '') or getattr(e, 'detail', '')}".rstrip(": ")
        return None


def closing_sentence(e) -> str:
    """The run's last line, a sentence: why it ended, where the artifact is, what it cost, who got the final weights.
    An ack only says a learner still running received the final cut; the artifact is the syncer's cut either way."""
    if e.missing_acks:
        who = f"; {', '.join(e.missing_acks)} did not confirm it received the final weights (the artifact does not need it)"
    elif e.acked:
        who = f"; {', '.join(e.acked)} received the final weights"
    else:
        who = ""      # no learner was still up to receive them: nothing to say
    return f"run finalized ({e.reason}): the artifact is in {e.output}, spend ${e.spend_usd:.4f}{who}."


async def follow(url: str, run_id: str, *, out=sys.stdout, progress=None) -> int:
    """Print the run's progress until it ends; 0 when finalized, 1 when it failed or was stopped.
    `progress`: the renderer (`line(event)`; trackers.py's follower feeds trackers and a live view), else Progress."""
    bus = await connect(url, name=f"follow-{run_id}")
    progress, ended = progress or Progress(), asyncio.get_running_loop().create_future()

    async def on_event(raw: Delivery) -> None:
        try:
            event = parse(raw.data)
        except SchemaError:
            return
        if ended.done():
            return
        text = progress.line(event)
        if text:
            print(text, file=out, flush=True)
        if event.type in TERMINAL:
            ended.set_result(TERMINAL[event.type])

    try:
        watch = await bus.watch(run_events(run_id), on_event)   # the bus re-creates it after a server restart
        try:
            return await ended
        finally:
            await watch.close()
    finally:
        await bus.close()


def follow_or_detach(url: str, run_id: str, then: Callable[[], str | None] | None = None, progress=None) -> int:
    """Follow the run to its end, then `then()` (a line to print, or None); Ctrl-C detaches (0) and skips it."""
    try:
        code = asyncio.run(follow(url, run_id, progress=progress))
    except KeyboardInterrupt:
        print(f"\ndetached; the run goes on (`yeto status {run_id}`, `yeto down {run_id}`)")
        return 0
    if then is not None and (line := then()):
        print(line, flush=True)
    return code
