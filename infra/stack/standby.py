"""A new standby syncer on a head over several VMs, when a shard has none left: its standby took the lease over from a
holder on another VM (that VM lost), or its standby was lost with its own VM (the holder merging on alone). The node
that runs none of the shard's syncers starts one (its supervisor: yeto/cli/head_watch.py), so a second VM's loss is
survived too (docs/CLUSTER.md).

What the lease says (services/syncer/lease.py writes it): the holder, its node, and whether it took the lease from a
syncer on another node. A standby's presence (services/syncer/presence.py): `<the lease's subject>.standby`, written
every second while it stands by; its sequence unchanged for LAPSE_S of this node's reads, the standby is gone. Read
from the lease's stream, every CHECK_S.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from yeto.infra.bus.snapshot_store import LEASE_PREFIX, LEASE_STREAM
from yeto.infra.stack import StackPaths, _write_record, component_env, locked, read_record
from yeto.infra.stack.components import alive_in, component_commands, spawn

log = logging.getLogger(__name__)
CHECK_S = 2.0
LAPSE_S = 10.0          # a standby writes its presence every second: ten seconds of the same sequence, it is gone
SUFFIX = ".standby"     # services/syncer/presence.py SUFFIX: a standby's presence beside its shard's lease


def shard_of(instance: str) -> str:
    """The shard's component name of a syncer instance: `syncer`, `syncer-K` (a standby's name starts with it)."""
    return instance.split("-standby")[0]


def wanted(lease: dict, node: str, running: set[str], lapsed: bool = False) -> str | None:
    """The standby this node starts for the shard whose lease reads `lease`, or None: only after a takeover from
    another node, or once the shard's standby's presence `lapsed`, on a node that is not the holder's and runs none
    of the shard's syncers."""
    shard = shard_of(lease.get("holder", ""))
    if not shard or not (lease.get("took_over") or lapsed) or lease.get("node") in ("", None, node):
        return None
    if any(name == shard or name.startswith(f"{shard}-standby") for name in running):
        return None
    return f"{shard}-standby-{node}"


def standby_command(rec: dict, paths: StackPaths, name: str, node: str) -> list[str]:
    base = component_commands(rec["url"], paths.root, paths.db, rec.get("syncers", 1), 2)[shard_of(name)]
    return [*base, "--lease", "--lease-node", node, "--instance", name]


async def leases(js) -> list[tuple[dict, int]]:
    """Every shard's lease as its holder last wrote it, with the sequence of its standby's presence (0: none)."""
    from nats.js.errors import NotFoundError

    try:
        info = await js.stream_info(LEASE_STREAM, subjects_filter=f"{LEASE_PREFIX}.>")
    except NotFoundError:
        return []
    subjects = set(info.state.subjects or {})
    found = []
    for s in sorted(x for x in subjects if not x.endswith(SUFFIX)):
        present = (await js.get_last_msg(LEASE_STREAM, s + SUFFIX)).seq if s + SUFFIX in subjects else 0
        found.append((json.loads((await js.get_last_msg(LEASE_STREAM, s)).data), present or 0))
    return found


class Presences:
    """The standbys' presence as this node reads it: since when each shard's has kept the same sequence."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, float]] = {}        # holder's shard -> (presence sequence, since)

    def lapsed(self, lease: dict, seq: int, now: float) -> bool:
        shard = shard_of(lease.get("holder", ""))
        if self.seen.get(shard, (None, 0.0))[0] != seq:
            self.seen[shard] = (seq, now)
        return seq > 0 and now - self.seen[shard][1] >= LAPSE_S

    def unanswered(self, now: float) -> None:
        """A read the stream did not answer (an election): no standby could write meanwhile, the lapses start again."""
        self.seen = {shard: (seq, now) for shard, (seq, _) in self.seen.items()}


def start_wanted(paths: StackPaths, found: list[tuple[dict, int]], presences: Presences | None = None) -> list[str]:
    """Start every standby this node's record wants after `found` leases (with their standbys' presence); their names
    (recorded with their pids)."""
    with locked(paths):             # the record read and written whole, by one writer at a time
        return _start_wanted(paths, found, presences)


def _start_wanted(paths: StackPaths, found: list[tuple[dict, int]], presences: Presences | None) -> list[str]:
    rec = read_record(paths)
    if not rec or not rec.get("peers"):
        return []
    node, started, now = f"yeto-{rec['node']}", [], time.monotonic()
    for lease, present in found:
        running = {name for name in rec["pids"] if alive_in(rec, name)}
        lapsed = presences is not None and presences.lapsed(lease, present, now)
        if (name := wanted(lease, node, running, lapsed)) is not None:
            cmd = standby_command(rec, paths, name, node)
            rec["pids"][name], rec.setdefault("started_at", {})[name] = spawn(cmd, paths.logs / f"{name}.log",
                                                                                env=component_env(paths.root, rec))
            _write_record(paths, rec)
            log.info("started %s: %s", name, f"the shard's standby gone (its presence unchanged {LAPSE_S:g}s)" if lapsed
                     else f"{lease['holder']} took the shard over from another node, which left it no standby")
            started.append(name)
    return started


async def keep_standbys(bus, state_dir: Path, stop: asyncio.Event) -> None:
    """Until stopped, every CHECK_S: a standby started here for each shard a takeover left without one."""
    from yeto.infra.bus.nats_bus import retryable

    paths, presences = StackPaths(state_dir), Presences()
    while not stop.is_set():
        try:
            start_wanted(paths, await leases(bus.js), presences)
        except Exception as e:  # noqa: BLE001 - an election (asked again next turn); anything else is logged
            if not retryable(e):
                log.warning("keeping a standby syncer: %r", e)
            presences.unanswered(time.monotonic())
        try:
            await asyncio.wait_for(stop.wait(), CHECK_S)
        except asyncio.TimeoutError:
            pass
