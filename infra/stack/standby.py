"""A new standby syncer after a takeover, on a head over several VMs: the shard's standby took the lease over from
a holder on another VM (that VM lost), so the shard has no standby left; the node that runs none of the shard's
syncers starts one (its supervisor: yeto/cli/head_watch.py), so a second VM's loss is survived too (docs/CLUSTER.md).

What the lease says (services/syncer/lease.py writes it): the holder, its node, and whether it took the lease from a
syncer on another node. Read from the lease's stream, every CHECK_S.
"""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from yeto.infra.bus.snapshot_store import LEASE_PREFIX, LEASE_STREAM
from yeto.infra.stack import StackPaths, _write_record, component_env, read_record
from yeto.infra.stack.components import alive_in, component_commands, spawn

log = logging.getLogger(__name__)
CHECK_S = 2.0


def shard_of(instance: str) -> str:
    """The shard's component name of a syncer instance: `syncer`, `syncer-K` (a standby's name starts with it)."""
    return instance.split("-standby")[0]


def wanted(lease: dict, node: str, running: set[str]) -> str | None:
    """The standby this node starts for the shard whose lease reads `lease`, or None: only after a takeover from
    another node, on a node that is not the holder's and runs none of the shard's syncers."""
    shard = shard_of(lease.get("holder", ""))
    if not shard or not lease.get("took_over") or lease.get("node") in ("", None, node):
        return None
    if any(name == shard or name.startswith(f"{shard}-standby") for name in running):
        return None
    return f"{shard}-standby-{node}"


def standby_command(rec: dict, paths: StackPaths, name: str, node: str) -> list[str]:
    base = component_commands(rec["url"], paths.root, paths.db, rec.get("syncers", 1), 2)[shard_of(name)]
    return [*base, "--lease", "--lease-node", node, "--instance", name]


async def leases(js) -> list[dict]:
    """Every shard's lease as its holder last wrote it."""
    from nats.js.errors import NotFoundError

    try:
        info = await js.stream_info(LEASE_STREAM, subjects_filter=f"{LEASE_PREFIX}.>")
    except NotFoundError:
        return []
    return [json.loads((await js.get_last_msg(LEASE_STREAM, s)).data) for s in (info.state.subjects or {})]


def start_wanted(paths: StackPaths, found: list[dict]) -> list[str]:
    """Start every standby this node's record wants after `found` leases; their names (recorded with their pids)."""
    rec = read_record(paths)
    if not rec or not rec.get("peers"):
        return []
    node, started = f"yeto-{rec['node']}", []
    for lease in found:
        running = {name for name in rec["pids"] if alive_in(rec, name)}
        if (name := wanted(lease, node, running)) is not None:
            cmd = standby_command(rec, paths, name, node)
            rec["pids"][name], rec.setdefault("started_at", {})[name] = spawn(cmd, paths.logs / f"{name}.log",
                                                                                env=component_env(paths.root, rec))
            _write_record(paths, rec)
            log.info("started %s: %s took the shard over from another node, which left it no standby", name,
                     lease["holder"])
            started.append(name)
    return started


async def keep_standbys(bus, state_dir: Path, stop: asyncio.Event) -> None:
    """Until stopped, every CHECK_S: a standby started here for each shard a takeover left without one."""
    from yeto.infra.bus.nats_bus import retryable

    paths = StackPaths(state_dir)
    while not stop.is_set():
        try:
            start_wanted(paths, await leases(bus.js))
        except Exception as e:  # noqa: BLE001 - an election (asked again next turn); anything else is logged
            if not retryable(e):
                log.warning("keeping a standby syncer: %r", e)
        try:
            await asyncio.wait_for(stop.wait(), CHECK_S)
        except asyncio.TimeoutError:
            pass
