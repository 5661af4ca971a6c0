"""Processes Yeto started, recorded with their start time so a stale record never signals a stranger."""
from __future__ import annotations

import os
import select
import signal
import time
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


def exit_within(pids: list[int], timeout_s: float) -> bool:
    """Every process of `pids` has ended within `timeout_s` (False at the deadline). Waits on pidfds, which become
    readable when their process exits (a zombie counts as ended); where there are none (not Linux), checks every 0.1 s."""
    deadline = time.monotonic() + timeout_s
    if not hasattr(os, "pidfd_open"):
        while any(alive(p) for p in pids):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True
    fds = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                continue
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        pending = set(fds)
        while pending:
            if (left := deadline - time.monotonic()) <= 0:
                return False
            for fd, _ in poller.poll(left * 1000):
                pending.discard(fd)
                poller.unregister(fd)
        return True
    finally:
        for fd in fds:
            os.close(fd)


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`, from /proc ([] where there is no /proc)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def group_has_ours(pgid: int, members: dict[int, float]) -> bool:
    """Group `pgid` still holds processes of ours: a recorded member runs in it, or members' children outlived them
    there. A group's id is never reused while it has a process, and its leader's pid (`pgid`, a recorded member) is
    not reused while the group lives: a live process with that pid started at another time means the old group is
    empty and the id is a stranger's now."""
    if group_is_ours(pgid, members):
        return True
    if alive(pgid) and not same_start(pgid, members.get(pgid)):
        return False
    return bool(group_members(pgid))


def reap_children() -> None:
    """Collect this process's children that exited, so none lingers as a zombie (a zombie reads as dead to `alive`)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
