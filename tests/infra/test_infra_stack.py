"""`yeto stack up|status|down` starts real detached processes and stops exactly those."""
from __future__ import annotations

import asyncio
import json

import pytest

from yeto.cli.main import main
from yeto.infra import stack
from yeto.infra.bus import connect
from yeto.schemas.base import SYSTEM_RUN
from yeto.schemas.subjects import event_subject

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _own_credentials(monkeypatch):
    """stack.up points this process at its stack's operator credential; undo that after the test."""
    monkeypatch.delenv("YETO_NATS_CREDS", raising=False)
    monkeypatch.delenv("YETO_NATS_CA", raising=False)


def test_stack_up_is_idempotent_and_down_stops_what_it_started(tmp_path, capsys):
    state = str(tmp_path / "home")
    assert main(["--state-dir", state, "stack", "up"]) == 0
    first = stack.read_record(stack.StackPaths(tmp_path / "home"))
    assert main(["--state-dir", state, "stack", "up"]) == 0
    again = stack.read_record(stack.StackPaths(tmp_path / "home"))
    assert first["pids"] == again["pids"] and first["url"] == again["url"]
    try:
        assert set(first["pids"]) == {"nats-server", "tape", "planner", "launcher", "syncer", "finalizer", "learner-zygote",
                                      "watchdog"}
        assert all(stack.alive(p) for p in first["pids"].values())
        assert asyncio.run(_services_started(first["url"])) == {"planner", "launcher", "syncer", "finalizer"}
    finally:
        assert main(["--state-dir", state, "stack", "down"]) == 0
    assert not any(stack.alive(p) for p in first["pids"].values())
    assert (tmp_path / "home" / "nats" / "jetstream").is_dir()  # data kept
    assert main(["--state-dir", state, "stack", "status"]) == 1
    assert "no stack" in capsys.readouterr().out


async def _services_started(url: str) -> set[str]:
    bus = await connect(url)
    names, all_four = set(), asyncio.Event()

    async def on_started(d) -> None:
        names.add(json.loads(d.data)["service"])
        if len(names) >= 4:
            all_four.set()
    try:
        watch = await bus.watch(event_subject(SYSTEM_RUN, "ServiceStarted"), on_started)
        await asyncio.wait_for(all_four.wait(), 30)
        await watch.close()
    finally:
        await bus.close()
    return names


def test_head_stack_serves_tls_with_credentials_and_refuses_anonymous_clients(tmp_path, monkeypatch):
    import os

    state = tmp_path / "head"
    rec = stack.up(state, head_run="r-head", hosts=["127.0.0.1"])
    try:
        assert rec["url"] == f"tls://127.0.0.1:{rec['port']}" and rec["ca_file"]
        assert "0.0.0.0" in (state / "nats" / "nats-server.conf").read_text()
        assert asyncio.run(_services_started(rec["url"])) == {"planner", "launcher", "syncer", "finalizer"}

        async def anonymous():
            await connect(f"tls://127.0.0.1:{rec['port']}", connect_timeout=2)

        monkeypatch.delenv("YETO_NATS_CREDS")
        with pytest.raises(ConnectionError):
            asyncio.run(anonymous())
        for secret in ("operator.json", "service.json", "users.conf"):
            assert oct(os.stat(state / "auth" / secret).st_mode & 0o777) == "0o600"
    finally:
        stack.down(state)


def test_stack_down_also_stops_the_local_islands_it_launched(tmp_path):
    import subprocess

    rec = stack.up(tmp_path / "s")
    island = subprocess.Popen(["sleep", "300"], start_new_session=True)   # stands in for a learner process group
    group = tmp_path / "s" / "runs" / "r1" / "islands" / "0" / "g0" / "group.json"
    group.parent.mkdir(parents=True)
    group.write_text(json.dumps({"pgid": island.pid, "pids": [island.pid],
                                 "started_at": {str(island.pid): stack.procs.started_at(island.pid)}}))
    stopped = stack.down(tmp_path / "s")
    assert island.wait(5) is not None and "r1/island-0" in stopped and "nats-server" in stopped
    assert not any(stack.alive(p) for p in rec["pids"].values())


def test_components_forked_from_one_process_each_run_as_their_own_and_a_killed_one_alone_restarts(tmp_path, monkeypatch):
    """The tape writer and the services are forked by one pre-imported process (infra/stack/forkserver.py, asked for
    with $YETO_FORK_SERVICES=1): each its own pid, session and log, each serving; kill -9 of one and `stack up` starts
    that one again, no other."""
    import os
    import signal

    from tests.waiting import wait_for
    from yeto.infra.stack import forkserver

    monkeypatch.setenv(forkserver.ENABLE_ENV, "1")

    state = tmp_path / "s"
    rec = stack.up(state, watch=False)     # `stack up` restarts the killed syncer here (the watchdog's own test:
    try:                                    # tests/infra/test_infra_watchdog.py)
        assert "watchdog" not in rec["pids"]
        forked = ("tape", "launcher", "syncer", "finalizer", "planner")
        pids = {n: rec["pids"][n] for n in forked}
        assert len(set(pids.values())) == len(forked)
        assert {n: os.getsid(p) for n, p in pids.items()} == pids                # a session of its own each
        assert {n: open(f"/proc/{p}/comm").read().strip() for n, p in pids.items()} == {
            n: f"yeto-{n}"[:15] for n in forked}                                  # forked, not spawned
        assert asyncio.run(_services_started(rec["url"])) == {"planner", "launcher", "syncer", "finalizer"}
        wait_for(lambda: (state / "tape.duckdb").exists(), 60, "the forked tape writer to open the tape")
        assert all((state / "logs" / f"{n}.log").exists() for n in forked)
        assert (state / "logs" / "forkserver.log").read_text() == ""              # no warning, no refusal

        os.kill(pids["syncer"], signal.SIGKILL)
        wait_for(lambda: not stack.alive(pids["syncer"]), 30, "the killed syncer gone")
        assert stack.status(state) == {**{n: True for n in rec["pids"]}, "syncer": False}
        again = stack.up(state)
        assert {n: again["pids"][n] for n in forked if n != "syncer"} == {n: p for n, p in pids.items() if n != "syncer"}
        assert again["pids"]["syncer"] != pids["syncer"] and stack.alive(again["pids"]["syncer"])
    finally:
        stack.down(state)
    assert not any(stack.alive(p) for p in rec["pids"].values())


def test_a_fork_server_that_does_not_answer_in_time_is_killed_and_every_component_is_spawned(tmp_path, monkeypatch):
    """No pid from the fork server within ANSWER_S (here: none while it still imports): it is killed and each
    component is spawned as a fresh interpreter instead, serving as a forked one would."""
    from yeto.infra.stack import forkserver

    monkeypatch.setenv(forkserver.ENABLE_ENV, "1")
    monkeypatch.setattr(forkserver, "ANSWER_S", 0.01)
    state = tmp_path / "s"
    rec = stack.up(state)
    try:
        names = ("tape", "launcher", "syncer", "finalizer", "planner")
        assert not [n for n in names if open(f"/proc/{rec['pids'][n]}/comm").read().startswith("yeto-")]   # spawned
        assert asyncio.run(_services_started(rec["url"])) == {"planner", "launcher", "syncer", "finalizer"}
        assert stack.status(state) == {n: True for n in rec["pids"]}
    finally:
        stack.down(state)
    assert not any(stack.alive(p) for p in rec["pids"].values())


def test_the_fork_server_is_the_default_and_yeto_fork_services_0_turns_it_off(tmp_path, monkeypatch):
    """Unset, a fresh stack's fork server starts (the default since its TLS-head fault was fixed, 19bd60e); with
    $YETO_FORK_SERVICES=0 none starts and every component is spawned."""
    from yeto.infra.stack import forkserver

    monkeypatch.delenv(forkserver.ENABLE_ENV, raising=False)
    server = forkserver.start(tmp_path / "forkserver.log")
    assert server is not None
    try:
        assert server.poll() is None
    finally:
        server.kill()
        server.wait(30)
    monkeypatch.setenv(forkserver.ENABLE_ENV, "0")
    assert forkserver.start(tmp_path / "off.log") is None


def _waiting_on(lock) -> bool:
    """Some process or thread waits for the flock on `lock` (/proc/locks lists a blocked request with '->')."""
    import os

    ino = os.stat(lock).st_ino
    with open("/proc/locks") as f:
        return any(line.split()[1] == "->" and line.split()[6].endswith(f":{ino}") for line in f)


def test_a_down_during_a_start_waits_for_its_whole_record_and_stops_every_component_it_started(tmp_path):
    """A fresh stack's record lists its components only from its second write (the first: nats-server alone, for the
    components that read it at once). `down` between the two stopped nats-server and left the components running;
    it now waits for the start's lock and stops what the whole record names."""
    import subprocess
    import threading
    import time

    paths = stack.StackPaths(tmp_path / "s")
    server, syncer = (subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in range(2))
    at = {p.pid: stack.procs.started_at(p.pid) for p in (server, syncer)}
    rec = {"url": "nats://127.0.0.1:1", "pids": {"nats-server": server.pid}, "started_at": {"nats-server": at[server.pid]}}
    stopped: list[list[str]] = []
    try:
        with stack.locked(paths):                        # as `up` holds it from its first look to its last write
            stack._write_record(paths, rec)              # the start's first write
            down = threading.Thread(target=lambda: stopped.append(stack.down(paths.root, timeout=5)))
            down.start()
            deadline = time.monotonic() + 30
            while not _waiting_on(paths.lock):           # down is blocked on the lock, not done
                assert down.is_alive(), f"down did not wait for the start: it stopped {stopped}"
                assert time.monotonic() < deadline, "down never asked for the lock"
                threading.Event().wait(0.01)
            rec["pids"]["syncer"], rec["started_at"]["syncer"] = syncer.pid, at[syncer.pid]
            stack._write_record(paths, rec)              # the second: with the components
        down.join(30)
        assert stopped and sorted(stopped[0]) == ["nats-server", "syncer"]
        assert server.wait(5) is not None and syncer.wait(5) is not None
        assert not paths.record.exists()
    finally:
        for p in (server, syncer):
            p.kill()
            p.wait()


def test_two_starts_at_once_in_one_state_directory_make_one_stack(tmp_path):
    """Two `yeto stack up` (or two `yeto launch` that each start the stack) at once: the second waits for the first
    and finds its stack serving; one nats-server, one tape writer, the same URL for both."""
    import os
    import re
    import signal
    import subprocess
    import sys
    from pathlib import Path

    state = tmp_path / "home"
    cmd = [str(Path(sys.executable).parent / "yeto"), "--state-dir", str(state), "stack", "up"]
    ups = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    try:
        outs = [u.communicate(timeout=120)[0] for u in ups]
        assert [u.returncode for u in ups] == [0, 0], outs
        urls = [re.search(r"stack up at (\S+)", o).group(1) for o in outs]
        assert urls[0] == urls[1], outs
        servers = [pid for pid, line in _running_under(state).items() if line.split()[0].endswith("/nats-server")]
        rec = stack.read_record(stack.StackPaths(state))
        assert servers == [rec["pids"]["nats-server"]], (servers, rec["pids"])
    finally:
        for u in ups:
            if u.poll() is None:
                u.kill()
        stack.down(state)
        for pid in _running_under(state):       # a second stack's processes, where the starts were not one at a time
            os.kill(pid, signal.SIGKILL)


def _running_under(state) -> dict[int, str]:
    """The processes whose command line or open files name a path under `state` (this test's own folder; a component
    forked by the stack's fork server has the fork server's command line, and its log open): pid -> command line."""
    import os
    from pathlib import Path

    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            files = [os.readlink(fd) for fd in (proc / "fd").iterdir()] if str(state) not in line else []
        except OSError:
            continue
        if str(state) in line or any(f.startswith(str(state)) for f in files):
            found[int(proc.name)] = line
    return found
