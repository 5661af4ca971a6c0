"""The stack's watchdog (infra/stack/watchdog.py) on a real local stack: a service and nats-server killed with
SIGKILL come back by themselves, each restart a ComponentRestarted on the tape and in `yeto stack status`; a component
that dies at every start is given up on until `yeto stack up`; `yeto stack down` is never undone; `--no-watchdog`."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal

import pytest

from tests.waiting import wait_for
from yeto.cli.main import main
from yeto.infra import stack
from yeto.infra.bus import connect
from yeto.infra.stack import watchdog
from yeto.infra.stack.components import alive_in
from yeto.schemas.base import SYSTEM_RUN
from yeto.schemas.subjects import EVT_STREAM, event_subject


@pytest.fixture(autouse=True)
def _own_credentials(monkeypatch):
    """stack.up points this process at its stack's operator credential; undo that after the test."""
    monkeypatch.delenv("YETO_NATS_CREDS", raising=False)
    monkeypatch.delenv("YETO_NATS_CA", raising=False)


def test_the_backoff_grows_per_component_and_the_window_forgets():
    assert [watchdog.delay(k) for k in range(7)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    crashes = watchdog.Crashes()
    assert [crashes.add("syncer", t) for t in (0.0, 10.0, 20.0)] == [1, 2, 3]
    assert crashes.recent("finalizer", 20.0) == 0                     # each component its own
    assert crashes.recent("syncer", 15.0 + watchdog.WINDOW_S) == 1    # the first two fell out of the window


def test_what_it_watches_leaves_leased_syncers_and_a_single_heads_server_alone():
    local = {"pids": {"nats-server": 1, "tape": 2, "syncer": 3, "watchdog": 4, "learner-zygote": 5}}
    assert watchdog.watched(local) == ["nats-server", "tape", "syncer", "learner-zygote"]
    head = {**local, "ca_file": "/x/server.pem", "cluster": 1}
    assert watchdog.watched(head) == ["tape", "syncer", "learner-zygote"]
    node = {"pids": {"nats-server-0": 1, "tape": 2, "syncer-0": 3, "syncer-0-standby": 4, "credentials": 6,
                     "watchdog": 7}, "ca_file": "/x/server.pem", "cluster": 3, "nodes": {"nats-server-0": {}},
            "peers": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}
    assert watchdog.watched(node) == ["nats-server-0", "tape", "credentials"]


def test_a_logs_last_line_is_kept_printable_and_short(tmp_path):
    log = tmp_path / "syncer.log"
    log.write_bytes(b"started\nTraceback ...\nMemoryError: \x1b[31m" + b"x" * 500 + b"\n\n")
    tail = watchdog.log_tail(log)
    assert tail.startswith("MemoryError: ?[31m") and len(tail) == watchdog.TAIL_CHARS
    assert watchdog.log_tail(tmp_path / "none.log") == ""


def _restarts(url: str) -> list[dict]:
    """Every ComponentRestarted in the event stream so far."""
    async def read() -> list[dict]:
        bus = await connect(url, name="test")
        try:
            last = (await bus.js.stream_info(EVT_STREAM)).state.last_seq
            out = []
            for seq in range(1, last + 1):
                try:
                    msg = await bus.js.get_msg(EVT_STREAM, seq)
                except Exception:  # noqa: BLE001 - a sequence with no message
                    continue
                if msg.subject == event_subject(SYSTEM_RUN, "ComponentRestarted"):
                    out.append(json.loads(msg.data))
            return out
        finally:
            await bus.close()
    return asyncio.run(read())


def _pid(state, name: str) -> int | None:
    rec = stack.read_record(stack.StackPaths(state))
    return rec["pids"].get(name) if rec else None


def _alive(state, name: str) -> int | None:
    """The recorded pid of `name` once it is alive as recorded, else None."""
    rec = stack.read_record(stack.StackPaths(state))
    return rec["pids"][name] if rec and alive_in(rec, name) else None


def _tape_rows(state, capsys, sql: str) -> list[dict]:
    assert main(["--state-dir", str(state), "sql", "--format", "json", sql]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_a_killed_service_and_nats_server_come_back_on_their_own_and_each_restart_is_on_the_tape(tmp_path, capsys):
    state = tmp_path / "home"
    assert main(["--state-dir", str(state), "stack", "up"]) == 0
    capsys.readouterr()
    rec = stack.read_record(stack.StackPaths(state))
    assert rec["watchdog"] is True and stack.alive(rec["pids"]["watchdog"])
    try:
        old = rec["pids"]["finalizer"]
        os.kill(old, signal.SIGKILL)
        new = wait_for(lambda: (p := _alive(state, "finalizer")) and p != old and p, 30, "the finalizer started again")
        event = wait_for(lambda: _restarts(rec["url"]), 30, "a ComponentRestarted in the event stream")[0]
        assert (event["component"], event["pid"], event["restarts"], event["gave_up"]) == ("finalizer", new, 1, False)
        assert event["source"] == "watchdog" and event["down_s"] >= 0

        others = {n: p for n, p in stack.read_record(stack.StackPaths(state))["pids"].items() if n != "nats-server"}
        os.kill(rec["pids"]["nats-server"], signal.SIGKILL)
        server = wait_for(lambda: (p := _alive(state, "nats-server")) and p != rec["pids"]["nats-server"] and p, 60,
                          "nats-server started again")
        after = stack.read_record(stack.StackPaths(state))
        assert after["url"] == rec["url"] and {n: p for n, p in after["pids"].items() if n != "nats-server"} == others, \
            "the components that still ran are kept (they reconnect), not started twice"
        def both_on_the_tape() -> list[dict] | None:
            rows = _tape_rows(state, capsys, "select payload from events where type = 'ComponentRestarted' order by seq")
            return rows if len(rows) == 2 else None
        rows = wait_for(both_on_the_tape, 60, "both restarts on the tape (its writer reconnected to the new server)",
                        detail=lambda: (state / "logs" / "watchdog.log").read_text())
        assert [json.loads(r["payload"])["component"] for r in rows] == ["finalizer", "nats-server"]
        assert json.loads(rows[1]["payload"])["pid"] == server

        assert main(["--state-dir", str(state), "stack", "status"]) == 0
        out = capsys.readouterr().out
        assert "finalizer" in out and "restarted 1x by the watchdog" in out, out
        assert main(["--state-dir", str(state), "status"]) == 0
        err = capsys.readouterr().err
        assert "warning: the watchdog started finalizer again 1 time(s) within 10 minutes" in err, err
        assert main(["--state-dir", str(state), "stack", "status", "--json"]) == 0
        procs = {p["name"]: p for p in json.loads(capsys.readouterr().out)["processes"]}
        assert procs["finalizer"]["restarts"] == 1 and procs["nats-server"]["restarts"] == 1 and procs["tape"]["restarts"] == 0
        final = stack.read_record(stack.StackPaths(state))
    finally:
        assert main(["--state-dir", str(state), "stack", "down"]) == 0
    # `down` is never undone: the watchdog stopped with the rest, nothing it could start again runs
    assert not any(stack.alive(p, final["started_at"][n]) for n, p in final["pids"].items())
    assert stack.read_record(stack.StackPaths(state)) is None


@pytest.mark.slow
def test_a_component_that_dies_at_every_start_is_given_up_on_until_stack_up(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("YETO_WATCHDOG_MAX_RESTARTS", "2")      # the forked watchdog reads it (default 5)
    state = tmp_path / "home"
    rec = stack.up(state)
    try:
        wait_for(lambda: (state / "tape.duckdb").exists(), 60, "the tape writer to open the tape")
        # Its file replaced by a folder: every start of the writer fails at once (DuckDB cannot open it)
        os.replace(state / "tape.duckdb", tmp_path / "tape.duckdb")
        (state / "tape.duckdb").mkdir()
        os.kill(rec["pids"]["tape"], signal.SIGKILL)
        events = wait_for(lambda: [e for e in _restarts(rec["url"]) if e["gave_up"]], 90,
                          "the watchdog to give up on the tape writer",
                          detail=lambda: (state / "logs" / "watchdog.log").read_text())
        tape = [e for e in _restarts(rec["url"]) if e["component"] == "tape"]
        assert [e["gave_up"] for e in tape] == [False, False, True] and tape[-1]["restarts"] == 2, tape
        assert tape[-1]["pid"] == 0 and tape[-1]["log_tail"], "the dead writer's last words, for the reader"
        assert events[0]["component"] == "tape"
        assert main(["--state-dir", str(state), "stack", "status"]) == 1
        out = capsys.readouterr().out
        assert "tape         DOWN" in out and "not started again" in out, out
        assert main(["--state-dir", str(state), "status"]) == 0
        assert "tape died 2 times within 10 minutes and the watchdog left it down" in capsys.readouterr().err
        assert stack.alive(rec["pids"]["watchdog"]) and not _alive(state, "tape")

        # The cause fixed, `yeto stack up` starts it, and the watchdog watches it again from a clean count
        (state / "tape.duckdb").rmdir()
        os.replace(tmp_path / "tape.duckdb", state / "tape.duckdb")
        assert main(["--state-dir", str(state), "stack", "up"]) == 0
        capsys.readouterr()
        wait_for(lambda: not watchdog.read_counts(state)["tape"]["gave_up"], 30, "the give-up lifted")
        again = _pid(state, "tape")
        os.kill(again, signal.SIGKILL)
        wait_for(lambda: (p := _alive(state, "tape")) and p != again, 30, "the writer started again by the watchdog")
    finally:
        stack.down(state)
        shutil.rmtree(tmp_path / "tape.duckdb", ignore_errors=True)


def test_no_watchdog_runs_none_and_keeps_the_choice(tmp_path):
    state = tmp_path / "home"
    rec = stack.up(state, watch=False)
    try:
        assert rec["watchdog"] is False and "watchdog" not in rec["pids"]
        assert "watchdog" not in stack.up(state)["pids"]            # `stack up` again: as the stack last ran
        with pytest.raises(ValueError, match="runs without its watchdog; `yeto stack down` first"):
            stack.up(state, watch=True)
    finally:
        stack.down(state)
