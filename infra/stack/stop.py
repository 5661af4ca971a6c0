"""Stopping what a stack record names: components by pid and local island groups by group id, each only
while it is still the process recorded (same start time), so a stale record never signals a stranger."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from yeto.infra import procs
from yeto.infra.nats.cluster import node_names


def stop_components(rec: dict, timeout: float) -> list[str]:
    """SIGTERM the recorded components (nats-server, or a cluster's nodes, last), SIGKILL what outlives `timeout`;
    the names stopped."""
    servers = node_names(rec)
    started = rec.get("started_at", {})
    stopped = []
    for group in ([n for n in rec["pids"] if n not in servers], servers):
        live = {n: rec["pids"][n] for n in group if procs.signal_if_ours(rec["pids"][n], started.get(n))}
        deadline = time.monotonic() + timeout
        while any(procs.alive(p, started.get(n)) for n, p in live.items()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for name, pid in live.items():
            procs.signal_if_ours(pid, started.get(name), signal.SIGKILL)
            stopped.append(name)
    return stopped


def stop_islands(runs: Path, timeout: float) -> list[str]:
    """Stop the learner process groups recorded under `runs` (<run>/islands/<i>/g<gen>/group.json) that still
    run; ended generations and groups whose id now belongs to someone else are left alone. Returns run/island-i."""
    groups = {}
    for record in runs.glob("*/islands/*/g*/group.json"):
        try:
            group = json.loads(record.read_text())
            pgid, members = group["pgid"], {int(p): t for p, t in group.get("started_at", {}).items()}
        except (OSError, ValueError, KeyError, AttributeError):
            continue
        if not group.get("ended") and _signal_group(pgid, members, signal.SIGTERM):
            groups[f"{record.parts[-5]}/island-{record.parts[-3]}"] = (pgid, members)
    deadline = time.monotonic() + timeout
    while groups and time.monotonic() < deadline and any(procs.group_is_ours(*g) for g in groups.values()):
        time.sleep(0.05)
    for pgid, members in groups.values():
        _signal_group(pgid, members, signal.SIGKILL)
    return sorted(groups)


def _signal_group(pgid: int, members: dict[int, float], sig: int) -> bool:
    if not procs.group_is_ours(pgid, members):
        return False
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True
