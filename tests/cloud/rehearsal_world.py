"""The rehearsal's world for the tests' fixtures: made under a folder (the future $YETO_REHEARSAL_DIR), the laptop's
folders hidden from islands, its shared record read, and all of it removed by name (rehearsal.py is the SkyApi)."""
from __future__ import annotations

import secrets
from pathlib import Path

import rehearsal_jobs as jobs
import rehearsal_net as net


def world_up(root: Path, names: dict = net.NAMES) -> dict:
    """Make the world (bridge, handle) under `root`, the future $YETO_REHEARSAL_DIR; `names`: its name prefixes."""
    world = {**net.world_names(secrets.token_hex(3)[:5], names), "venv_bin": jobs.venv_bin()}
    with jobs.locked(root) as state:
        state.update(world=world, clusters={}, jobs={}, cancels=[], next_index=1)
    net.world_up(world)
    return world


def hide(root: Path, folders: list[Path]) -> None:
    """Island jobs started from now on find these folders (the laptop's) empty. The head is not hidden from: it
    makes the islands' namespaces, which a mount namespace of its own would keep from this machine."""
    with jobs.locked(root) as state:
        state["world"]["hidden"] = [str(Path(f).resolve()) for f in folders]


def world_down(root: Path) -> None:
    """Every process, namespace, veth and the bridge of the world under `root`, by name."""
    with jobs.locked(root) as state:
        if state.get("world"):
            net.world_down(state["world"])


def job_status(api, job_id: int) -> str:
    return next(j.status for j in api.jobs_queue() if j.job_id == job_id)


def record(root: Path) -> dict:
    """The shared record as it is now (for tests)."""
    with jobs.locked(root) as state:
        return state


def as_operator(head: dict, ask):
    """`await ask(bus)` on a head (every node of it), connected as its operator with the laptop's record `head`."""
    import asyncio
    import os
    from unittest import mock

    from yeto.infra.bus.nats_bus import NatsBus

    async def run():
        bus = await NatsBus.connect(head["url"], name="test")
        try:
            return await ask(bus)
        finally:
            await bus.close()
    with mock.patch.dict(os.environ, {"YETO_NATS_CREDS": head["creds_file"], "YETO_NATS_CA": head["ca_file"]}):
        return asyncio.run(run())
