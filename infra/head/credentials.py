"""The credential follower of a head over several VMs: every node admits every learner of the run.

A launcher issues an island's credential on its own machine (infra/bus/auth.py) and reloads its own nats-server. The
other nodes' servers read their own users files, so a learner that moves to another node (its own died) would be
refused there. On a head of several nodes the laptop puts one learner key in the bundle every node gets, and a
learner's password for a generation is derived from it; this process, one per node, follows the run's
IslandRequested events (published as each island generation is started) and issues the same credential on its
node, and revokes the run's credentials when the run ends, as the launcher does on its own. No password ever crosses
the bus: the events carry only the island and its generation.
`python -m yeto.infra.head.credentials --nats-url URL --state-dir DIR --run-id RUN` (infra/stack starts it).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from yeto.infra.bus import Delivery, auth, connect
from yeto.schemas import parse
from yeto.schemas.final import ENDING_EVENTS
from yeto.schemas.fleet import learner_name
from yeto.schemas.subjects import event_subject

log = logging.getLogger("yeto.credentials")


def admit(state_dir: Path, run_id: str, data: bytes) -> str:
    """What one of the run's IslandRequested or ending events changes on this node; a line for the log."""
    event = parse(data)
    if event.run_id != run_id:
        return f"ignored an event of run {event.run_id}"
    if event.type == "IslandRequested":
        auth.issue_learner(state_dir, run_id, learner_name(event.island), event.generation)
        return f"admits {learner_name(event.island)} generation {event.generation}"
    return f"run ended ({event.type}): {auth.revoke_run(state_dir, run_id)} credential(s) revoked"


async def follow(url: str, state_dir: Path, run_id: str, stop: asyncio.Event) -> None:
    bus = await connect(url, name="credentials")

    async def on_event(d: Delivery) -> None:
        log.info("%s", admit(state_dir, run_id, d.data))

    subs = [await bus.watch(event_subject(run_id, t), on_event) for t in ("IslandRequested", *ENDING_EVENTS)]
    try:
        await stop.wait()
    finally:
        for sub in subs:
            await sub.close()
        await bus.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m yeto.infra.head.credentials", description=__doc__.splitlines()[0])
    p.add_argument("--nats-url", required=True)
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--run-id", required=True)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s credentials %(levelname)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await follow(a.nats_url, a.state_dir, a.run_id, stop)
    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
