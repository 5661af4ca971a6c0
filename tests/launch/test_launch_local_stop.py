"""The local backend's stop ends an island generation for good: a frozen (SIGSTOPped) rank, which keeps a pending
SIGTERM until it runs again, and a rank that ignores SIGTERM both end; other signals are sent as they are."""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from waiting import wait_for
from yeto.infra import procs
from yeto.services.launcher.backends import local
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import LocalBackend

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc")

# A rank that says it is ready (its SIGTERM disposition set), then waits.
RANK = ("import signal, sys, time\n"
        "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n")


def _launch(count: int) -> IslandLaunch:
    return IslandLaunch(run_id="r1", island=0, generation=0, num_islands=1, nats_url="nats://x",
                        spec={"cloud": "local", "gpu": "cpu", "count": count}, recipe={"train": {}})


def _started(tmp_path: Path, mode: str, count: int = 2) -> tuple[LocalBackend, dict]:
    """A real local island generation of `count` ranks, each ready (its SIGTERM disposition in place)."""
    backend = LocalBackend(tmp_path, rank_argv=lambda launch, recipe, rank, port: [sys.executable, "-c", RANK, mode])
    backend.start(_launch(count))
    log = backend.log_path("r1", 0)
    wait_for(lambda: log.read_text().count("ready") == count or None, 60, "every rank to be ready")
    return backend, json.loads((backend.gen_dir("r1", 0, 0) / "group.json").read_text())


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _kill_leftovers(group: dict) -> None:
    for pid in procs.group_members(group["pgid"]):
        procs.signal_if_ours(pid, procs.started_at(pid), signal.SIGKILL)


def test_a_frozen_generation_is_ended_by_the_launchers_stop(tmp_path):
    backend, group = _started(tmp_path, "default")
    try:
        members = procs.group_members(group["pgid"])
        assert len(members) == 4                       # two shell wrappers and their two ranks
        backend.stop("r1", 0, 0, "", sig=signal.SIGSTOP)       # `yeto chaos freeze`: sent as it is, nothing ends
        wait_for(lambda: all(_state(p) == "T" for p in members) or None, 30, "every process to be stopped")
        backend.stop("r1", 0, 0, "")                   # the launcher's stop of a silent island
        assert procs.group_members(group["pgid"]) == []
        assert not backend.status("r1", 0, 0, "").running
    finally:
        _kill_leftovers(group)


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "STOP_GRACE_S", 1.0)
    backend, group = _started(tmp_path, "ignore", count=1)
    try:
        backend.stop("r1", 0, 0, "")
        # its shell wrapper ended on SIGTERM; the rank, left in the group, was killed once the grace ran out
        assert procs.group_members(group["pgid"]) == []
    finally:
        _kill_leftovers(group)


def test_a_signal_other_than_sigterm_is_only_sent(tmp_path):
    backend, group = _started(tmp_path, "default", count=1)
    try:
        backend.stop("r1", 0, 0, "", sig=signal.SIGSTOP)
        members = procs.group_members(group["pgid"])
        wait_for(lambda: all(_state(p) == "T" for p in members) or None, 30, "every process to be stopped")
        backend.stop("r1", 0, 0, "", sig=signal.SIGCONT)
        wait_for(lambda: all(_state(p) in ("S", "R") for p in members) or None, 30, "every process to run again")
        assert backend.status("r1", 0, 0, "").running
    finally:
        backend.stop("r1", 0, 0, "")
        _kill_leftovers(group)


def test_group_has_ours_refuses_a_group_whose_leader_pid_is_a_strangers(tmp_path):
    """The leader's pid alive with another start time: the recorded group is empty and the id is someone else's."""
    backend, group = _started(tmp_path, "default", count=1)
    try:
        members = {int(p): t for p, t in group["started_at"].items()}
        assert procs.group_has_ours(group["pgid"], members)
        moved = {pid: started - 100 for pid, started in members.items()}     # as if recorded for an earlier process
        assert not procs.group_has_ours(group["pgid"], moved)
    finally:
        backend.stop("r1", 0, 0, "")
        _kill_leftovers(group)
