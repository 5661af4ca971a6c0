"""The head VM's supervisor (`yeto stack up --head --foreground`): serves the run's artifact files to the laptop,
mirrors what a replacement head needs beside the run's --output (infra/head/mirror.py: mirror mode) and, once the
run has ended and the laptop copied it back (RunCopiedBack), or `--linger` seconds after the end, stops the stack
and exits 0; SkyPilot's autodown then terminates the VM. So the head owns its own end: a laptop that crashed or
went offline costs at most the linger, never a VM left running. A head whose run never arrives (the CLI died after
renting it) stops `--await-run` seconds after it started."""
from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from yeto.infra import stack
from yeto.infra.bus import Delivery, connect
from yeto.infra.head import artifact_files, mirror, rendezvous
from yeto.infra.stack import standby
from yeto.schemas import parse
from yeto.schemas.final import ENDING_EVENTS, end_of_run
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.subjects import event_subject

WATCHED = ("RunLaunched", *ENDING_EVENTS, "RunCopiedBack")
SNAPSHOT = "SnapshotWritten"     # the syncer's newest snapshot: the mirror copies it at once


def verdict(seen: dict[str, float], now: float, linger_s: float, *, started: float | None = None,
            await_s: float | None = None) -> tuple[str | None, float | None]:
    """Why the head is done (None: not yet), and how long to wait for news at most (None: until some comes).
    `seen` maps each WATCHED event type seen to its time (the first of each); with `started` and `await_s`, a
    head that has seen no RunLaunched `await_s` after it started is done."""
    end = end_of_run(seen)
    if end is None and "RunLaunched" not in seen and started is not None and await_s is not None:
        left = started + await_s - now
        return (f"no run arrived within --await-run {await_s:g}s", 0.0) if left <= 0 else (None, left)
    if end is None:
        return None, None
    if "RunCopiedBack" in seen:
        return "the laptop copied the run back", 0.0
    left = end + linger_s - now
    return (f"nobody copied the run back within --linger {linger_s:g}s", 0.0) if left <= 0 else (None, left)


async def supervise(state_dir: Path, url: str, run_id: str, linger_s: float, stop: asyncio.Event,
                    await_s: float | None = None, mirror_mode: bool = True) -> str:
    """Serve and watch until the head is done (or `stop` is set); returns why. `mirror_mode` False: no mirror (a
    node of a head over several VMs)."""
    started = time.time()
    bus = await connect(url, name="head-watch")
    seen: dict[str, float] = {}
    news = asyncio.Event()

    mirroring: list[asyncio.Task] = []
    if not mirror_mode:             # a node of a head over several VMs: a new standby syncer after a takeover
        mirroring.append(asyncio.create_task(standby.keep_standbys(bus, state_dir, stop)))
    snapshot_written = asyncio.Event()

    async def on_snapshot(_: Delivery) -> None:
        snapshot_written.set()

    async def on_event(d: Delivery) -> None:
        event = parse(d.data)
        seen.setdefault(d.subject.split(".")[3], event.ts.timestamp())
        recipe = LaunchRecipe.upcast(event.recipe) if event.type == "RunLaunched" else None
        if mirror_mode and recipe and recipe.output and not recipe.output.startswith("hf://") and not mirroring:
            root = mirror.mirror_root(recipe.output, run_id)
            mirroring.append(asyncio.create_task(mirror.keep_mirrored(bus, state_dir, run_id, root, stop,
                                                                      poke=snapshot_written,
                                                                      then=rendezvous.first_head(root, run_id, recipe.bus_url))))
        news.set()

    # One watch per type: the supervisor never reads the run's stream of progress events.
    subs = [await bus.watch(event_subject(run_id, t), on_event) for t in WATCHED]
    subs.append(await bus.watch(event_subject(run_id, SNAPSHOT), on_snapshot, deliver="new",
                                headers_only=True))
    subs.append(await artifact_files.serve(bus, state_dir, run_id))
    try:
        while True:
            news.clear()
            why, wait_s = verdict(seen, time.time(), linger_s, started=started, await_s=await_s)
            if why or stop.is_set():
                return why or "stopped by a signal"
            waits = [asyncio.create_task(news.wait()), asyncio.create_task(stop.wait())]
            await asyncio.wait(waits, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
    finally:
        stop.set()                 # the mirror's last turn, then it ends
        await asyncio.gather(*mirroring)
        for sub in subs:
            await sub.close()
        await bus.close()


async def _main(state_dir: Path, url: str, run_id: str, linger_s: float, await_s: float | None, mirror_mode: bool) -> str:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await supervise(state_dir, url, run_id, linger_s, stop, await_s, mirror_mode)


def run(state_dir: Path, url: str, run_id: str, linger_s: float, await_s: float | None = None, mirror: bool = True) -> int:
    """The head's foreground loop: supervise, then stop the stack. Exit status 0 however it ended."""
    print(f"head of run {run_id}: serving until the run has ended and is copied back (or --linger {linger_s:g}s "
          f"after its end)", flush=True)
    try:
        why = asyncio.run(_main(state_dir, url, run_id, linger_s, await_s, mirror))
    finally:
        stopped = stack.down(state_dir)
    print(f"{why}: stopped {', '.join(stopped)}", flush=True)
    return 0
