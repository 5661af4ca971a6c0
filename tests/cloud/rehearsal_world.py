"""The rehearsal's world for the tests' fixtures: made under a folder (the future $YETO_REHEARSAL_DIR), the laptop's
folders hidden from islands, its shared record read, and all of it removed by name (rehearsal.py is the SkyApi)."""
from __future__ import annotations

import secrets
from pathlib import Path

import rehearsal_jobs as jobs
import rehearsal_net as net
from yeto.services.launcher.backends.skypilot import QUEUE_ENV

QUEUE_S = 3.0
# The environment every task of the world gets beside its own (rehearsal_jobs.environment). A head's launcher reads
# SkyPilot's job queue at most every QUEUE_S instead of 15 s (services/launcher/backends/skypilot.py): each read is a
# call through SkyPilot's API server in the cloud, a file read here, where an island's job ends the moment its process
# does; at 15 s every run to --max-steps sat up to 15 s after its islands ended before the launcher saw it. Still
# longer than the launcher's 1 s poll, so the rehearsal shows the reads are held to it.
# OMP_NUM_THREADS: a rented VM's cores are its own; the rehearsal's VMs share this box's two with the rest of the suite,
# where an island sized to both cores spun in OpenMP's barriers whenever another process held one (tests/conftest.py).
ENV = {QUEUE_ENV: f"{QUEUE_S:g}", "OMP_NUM_THREADS": "1"}


def world_up(root: Path, names: dict = net.NAMES) -> dict:
    """Make the world (bridge, handle) under `root`, the future $YETO_REHEARSAL_DIR; `names`: its name prefixes."""
    world = {**net.world_names(secrets.token_hex(3)[:5], names), "venv_bin": jobs.venv_bin(), "env": dict(ENV)}
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


def tape_rows(head: dict, query: str, *, waiting: bool = False, timeout_s: float | None = None) -> list[list[str]] | None:
    """The rows of `query` on a head's tape as `yeto sql --run RUN --format csv` prints them (each cell its text, '' for
    null, split on commas), asked of its tape writer from this process, as its operator (as_operator): a poll costs
    no CLI process (2-7 s of a loaded machine's CPU each, competing with the run it waits on). `waiting`: None while
    no node or no tape writer answers (a busy moment, or a node just lost), where `yeto sql` would fail; a poll's
    request is given 10 s (a request sent as the node it would reach dies is never answered: the next poll asks again
    sooner than the writer's 30 s query deadline), any other 30 s."""
    from yeto.cli.sql import render
    from yeto.infra.tape.sql import NoTapeWriterError, ask

    async def asked(bus):
        return await ask(bus, query, timeout=timeout_s or (10.0 if waiting else 30.0))
    try:
        result = as_operator(head, asked)
    except (ConnectionError, NoTapeWriterError) as e:
        if waiting:
            return None
        raise AssertionError(f"{query}: {e}") from e
    except ValueError as e:
        if waiting and "did not answer within" in str(e):
            return None
        raise AssertionError(f"{query}: {e}") from e
    return [line.split(",") for line in render(result["columns"], result["rows"], "csv").strip().splitlines()[1:]]
