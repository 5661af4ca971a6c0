"""Processes Yeto started, recorded with their start time so a stale record never signals a stranger."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
EPOCH_FLOOR = 1e8
"""A recorded start above this is seconds since the epoch (records before boot-relative starts); since boot is less."""


def started_at(pid: int) -> float | None:
    """The process's start time, None when there is no such process: on Linux seconds since boot from
    /proc/<pid>/stat (clock ticks, exact and fixed for the process's life), elsewhere psutil's create_time.
    Not psutil's create_time on Linux: that adds the boot time of /proc/stat, an integer second derived from the
    wall clock, which moves when the clock is slewed or stepped (NTP) and then names the same process a second
    apart: a live island then reads as dead to the local launcher (the likely cause of live islands replaced under
    load) and a running stack as gone to `stack down`."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / TICKS
    except FileNotFoundError:
        if not Path("/proc/self/stat").exists():
            return _epoch_start(pid)
        return None
    except (OSError, IndexError, ValueError):
        return None


def _epoch_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def alive(pid: int, started: float | None = None) -> bool:
    """The process runs (a zombie does not count); with `started`, it must also be the one recorded then
    (a pid reused by another process since reads as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OverflowError, ValueError):
        return False
    try:  # a zombie child of ours counts as dead
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except OSError:
        return False
    return started is None or same_start(pid, started)


def same_start(pid: int, started: float | None) -> bool:
    """`pid` is the process started at `started` (a record's start: since boot, or since the epoch from records
    written before starts were boot-relative)."""
    if started is None:
        return False
    now = _epoch_start(pid) if started > EPOCH_FLOOR else started_at(pid)
    return now is not None and abs(now - started) < 0.05


def signal_if_ours(pid: int, started: float | None, sig: int = signal.SIGTERM) -> bool:
    """Signal `pid` only if it is the process recorded with start time `started`; False when it is not (gone,
    reused, or recorded without a start time, which proves nothing)."""
    if started is None or not alive(pid, started):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def group_is_ours(pgid: int, members: dict[int, float]) -> bool:
    """Some recorded member (pid: start time) still runs in process group `pgid`: the group is ours, and
    its id cannot have been reused while a member lives. A member recorded without a start time proves nothing."""
    for pid, started in members.items():
        try:
            if started is not None and alive(pid, started) and os.getpgid(pid) == pgid:
                return True
        except ProcessLookupError:
            continue
    return False
