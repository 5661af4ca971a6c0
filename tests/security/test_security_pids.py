"""Stale pid records never reach an unrelated process: `stack down` and the local backend verify each recorded
process's start time before signalling, and an island generation that ended is marked so nothing signals it."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from waiting import wait_for
from yeto.infra import procs, stack
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import LocalBackend


@pytest.fixture
def stranger():
    """A live process that is none of Yeto's, in a process group of its own (as a learner group would be)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _stack_record(state, pid: int, started) -> None:
    """A stack record naming one nats-server: `pid`, recorded as started at `started`."""
    (state / "stack.json").write_text(json.dumps({"url": "nats://127.0.0.1:1", "port": 1, "pids": {"nats-server": pid},
                                                  "started_at": {"nats-server": started}}))


def _stale_group(state, stranger, started_at) -> None:
    group = state / "runs" / "r1" / "islands" / "0" / "g0" / "group.json"
    group.parent.mkdir(parents=True)
    group.write_text(json.dumps({"pgid": stranger.pid, "pids": [stranger.pid], "started_at": started_at}))


@pytest.mark.parametrize("recorded", ["earlier", "missing"])
def test_stack_down_leaves_a_live_process_alone_when_a_stale_record_names_its_pid(tmp_path, stranger, recorded):
    state = tmp_path / "home"
    state.mkdir()
    started = {"earlier": {n: procs.started_at(stranger.pid) - 100 for n in ("nats-server", "tape", "syncer")},
               "missing": {}}[recorded]    # the pid was someone else's then, or the record is from before start times
    (state / "stack.json").write_text(json.dumps({"url": "nats://127.0.0.1:1", "port": 1, "started_at": started,
                                                  "pids": {"nats-server": stranger.pid, "tape": stranger.pid,
                                                           "syncer": stranger.pid}}))
    _stale_group(state, stranger, {str(stranger.pid): started.get("tape")})
    assert stack.status(state) == {"nats-server": False, "tape": False, "syncer": False}
    assert stack.stack_url(state) is None
    assert stack.down(state, timeout=1) == []
    assert stranger.poll() is None and procs.alive(stranger.pid)


def test_stack_down_still_stops_the_processes_it_recorded(tmp_path, stranger):
    """The check is not a way of never stopping anything: the right start time is signalled."""
    state = tmp_path / "home"
    state.mkdir()
    mine = subprocess.Popen(["sleep", "60"], start_new_session=True)
    _stack_record(state, mine.pid, procs.started_at(mine.pid))
    assert stack.down(state, timeout=5) == ["nats-server"]
    assert mine.wait(5) == -signal.SIGTERM and stranger.poll() is None


def _ended(status):
    return None if status.running else status


def _launch(generation: int = 0) -> IslandLaunch:
    return IslandLaunch(run_id="r1", island=0, generation=generation, num_islands=1, nats_url="nats://x",
                        spec={"cloud": "local", "gpu": "cpu", "count": 1}, recipe={"train": {}})


def test_the_local_backend_neither_stops_nor_counts_a_stranger_named_by_a_stale_group(tmp_path, stranger):
    _stale_group(tmp_path, stranger, {str(stranger.pid): procs.started_at(stranger.pid) - 100})
    backend = LocalBackend(tmp_path)
    backend.stop("r1", 0, 0, str(stranger.pid), sig=signal.SIGKILL)
    assert stranger.poll() is None
    assert not backend.status("r1", 0, 0, str(stranger.pid)).running


def test_an_island_generation_that_ended_is_marked_and_never_signalled_again(tmp_path):
    quick = "import sys; sys.exit(0)"
    backend = LocalBackend(tmp_path, rank_argv=lambda launch, recipe, rank, port: [sys.executable, "-c", quick])
    handle = backend.start(_launch())
    record = backend.gen_dir("r1", 0, 0) / "group.json"
    started = json.loads(record.read_text())["started_at"]
    assert set(started) == {handle} and started[handle] is not None

    status = wait_for(lambda: _ended(backend.status("r1", 0, 0, handle)), 30, "the one rank to finish")
    assert status.exit_code == 0 and json.loads(record.read_text())["ended"] is True
    assert backend.status("r1", 0, 0, handle).exit_code == 0           # the same answer afterwards
    assert backend.start(_launch()) == handle                          # and still never started twice
    assert stack.stop_local_islands(stack.StackPaths(tmp_path), timeout=1) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat's boot time is Linux's")
def test_a_boot_time_moved_by_the_clock_does_not_make_a_live_process_a_stranger(tmp_path, monkeypatch):
    """/proc/stat's btime is the wall clock minus the time since boot, printed in whole seconds: an NTP slew or
    step moves it, and a start time built on it then names the same process a second (or more) apart. Recorded
    starts are boot-relative, so the launcher still sees its island running and `stack down` still stops it."""
    mine = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        state = tmp_path / "home"
        state.mkdir()
        since_boot, epoch = procs.started_at(mine.pid), procs._epoch_start(mine.pid)
        assert since_boot is not None and epoch is not None
        _stack_record(state, mine.pid, since_boot)
        _stale_group(state, mine, {str(mine.pid): since_boot})
        monkeypatch.setattr(procs.psutil._pslinux, "boot_time", lambda: epoch - since_boot + 1.0)
        assert abs(procs._epoch_start(mine.pid) - epoch - 1.0) < 0.05     # psutil's answer did move by the second
        assert LocalBackend(state).status("r1", 0, 0, str(mine.pid)).running
        assert stack.down(state, timeout=5) == ["nats-server"]
        assert mine.wait(5) == -signal.SIGTERM
    finally:
        mine.kill()
        mine.wait()


def test_a_record_from_before_boot_relative_starts_still_names_its_process(tmp_path):
    """A stack started by an older Yeto recorded seconds since the epoch: `stack down` still stops it."""
    mine = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        state = tmp_path / "home"
        state.mkdir()
        _stack_record(state, mine.pid, procs._epoch_start(mine.pid))
        assert stack.down(state, timeout=5) == ["nats-server"]
        assert mine.wait(5) == -signal.SIGTERM
    finally:
        mine.kill()
        mine.wait()
