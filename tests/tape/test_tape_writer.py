"""The tape writer as a real process against a real nats-server: exactly once across kill -9, SQL over NATS, replay."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from tape_events import scripted_run
from waiting import wait_for
from yeto.cli.main import main
from yeto.cli.tape import load_run
from yeto.infra.bus import Bus, connect
from yeto.infra.tape.sql import ask, query_file
from yeto.schemas.run_view import fold
from yeto.schemas.subjects import event_subject

pytestmark = pytest.mark.timeout(120)


def tick(i: int) -> bytes:
    return json.dumps({"type": "Tick", "version": 1, "id": f"e{i}", "run_id": "r-kill", "ts": "2025-01-01T00:00:00Z",
                       "source": "test", "i": i}).encode()


def start_writer(url: str, db, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "yeto.infra.tape", "--nats-url", url, "--db", str(db), "--batch", "1000"],
                            stdout=log, stderr=subprocess.STDOUT)


async def count_when(bus: Bus, predicate, timeout: float = 60.0) -> int:
    """Ask the writer until the tape's row count satisfies predicate; return it. (The pause only paces the
    questions; what the test waits on is the answer.)"""
    loop = asyncio.get_running_loop()
    deadline, n = loop.time() + timeout, None
    while loop.time() < deadline:
        try:
            n = (await ask(bus, "SELECT count(*) FROM events", timeout=2))["rows"][0][0]
            if predicate(n):
                return n
        except ValueError:   # the writer is (re)starting
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"tape stuck at {n} rows")


@pytest.mark.slow
async def test_kill_9_mid_publish_then_restart_leaves_every_event_exactly_once(fresh_nats, tmp_path):
    total, chunk = 10_000, 250
    bus = await connect(fresh_nats.url)
    log = open(tmp_path / "tape.log", "ab")
    writer = start_writer(fresh_nats.url, tmp_path / "tape.duckdb", log)
    killed_at = None
    try:
        for start in range(0, total, chunk):
            await asyncio.gather(*(bus.publish_raw(event_subject("r-kill", "Tick"), tick(i), msg_id=f"e{i}")
                                   for i in range(start, start + chunk)))
            if start == 2500:                        # the writer is mid-stream: kill it hard
                killed_at = await count_when(bus, lambda n: n > 0)
                os.kill(writer.pid, signal.SIGKILL)
                writer.wait()
            if start == 6000:                        # publishing went on while it was dead
                writer = start_writer(fresh_nats.url, tmp_path / "tape.duckdb", log)
        await count_when(bus, lambda n: n >= total)
        # One more event: the writer lands the stream in order, so once it is on the tape a duplicate of
        # any earlier one would be there too.
        await bus.publish_raw(event_subject("r-kill", "Tick"), tick(total), msg_id=f"e{total}")
        await count_when(bus, lambda n: n > total)
        (rows,) = (await ask(bus, "SELECT count(*), count(DISTINCT payload->>'id'), min(seq), max(seq), "
                                  "count(DISTINCT seq) FROM events"))["rows"]
        assert rows == [total + 1] * 2 + [1] + [total + 1] * 2
        assert 0 < killed_at < total
    finally:
        writer.terminate()
        assert writer.wait(10) == 0                  # SIGTERM: commits what it has, exits cleanly
        await bus.close()


async def test_a_stop_lands_every_event_the_stream_held_before_the_writer_exits(fresh_nats, tmp_path):
    """A stack stopped right after an event (the head once the laptop's RunCopiedBack is in) keeps it on its tape."""
    total = 3000
    bus = await connect(fresh_nats.url)
    writer = start_writer(fresh_nats.url, tmp_path / "tape.duckdb", open(tmp_path / "tape.log", "ab"))
    try:
        await count_when(bus, lambda n: n == 0)                 # up and answering
        await asyncio.gather(*(bus.publish_raw(event_subject("r-stop", "Tick"), tick(i), msg_id=f"s{i}")
                               for i in range(total)))          # every one acked by the stream
        writer.terminate()                                      # at once: most are still in the stream only
        assert writer.wait(30) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
        await bus.close()
    (row,) = query_file(tmp_path / "tape.duckdb", "SELECT count(*), count(DISTINCT seq), max(seq) FROM events")["rows"]
    assert row == [total, total, total], (row, (tmp_path / "tape.log").read_text()[-2000:])


async def test_sql_over_nats_reads_and_refuses_writes_and_unparsable_payloads_land(fresh_nats, tmp_path, capsys):
    bus = await connect(fresh_nats.url)
    writer = start_writer(fresh_nats.url, tmp_path / "tape.duckdb", open(tmp_path / "tape.log", "ab"))
    try:
        await bus.publish_raw(event_subject("r-bad", "Garbage"), b"\xff{definitely not json", msg_id="bad-1")
        await bus.publish(scripted_run("r-ok")[0])
        await count_when(bus, lambda n: n == 2)
        reply = await ask(bus, "SELECT seq, run_id, type FROM events ORDER BY seq")
        assert reply["rows"] == [[1, "r-bad", "unparsable"], [2, "r-ok", "RunLaunched"]]
        for sql in ("DROP TABLE events", "INSERT INTO events SELECT * FROM events", "ATTACH 'x.db'", "COPY events TO 'x.csv'"):
            with pytest.raises(ValueError, match="the tape is read-only"):
                await ask(bus, sql)
        with pytest.raises(ValueError, match="file system operations are disabled"):
            await ask(bus, "SELECT * FROM read_text('/etc/hostname')")
        # the CLI asks the same writer when given the stack's URL
        select = "SELECT run_id, type FROM events ORDER BY seq"
        assert await asyncio.to_thread(main, ["--nats-url", fresh_nats.url, "sql", select]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[2].split() == ["r-bad", "unparsable"] and "(2 rows)" in out
        assert await asyncio.to_thread(main, ["--nats-url", fresh_nats.url, "sql", "DELETE FROM events"]) == 2
        assert "read-only: DELETE" in capsys.readouterr().err
    finally:
        writer.terminate()
        assert writer.wait(10) == 0
        await bus.close()


async def test_replaying_the_tape_rebuilds_the_live_run_view(fresh_nats, tmp_path):
    bus = await connect(fresh_nats.url)
    writer = start_writer(fresh_nats.url, tmp_path / "tape.duckdb", open(tmp_path / "tape.log", "ab"))
    try:
        live = None
        for event in scripted_run("r-live"):          # the live fold: each event as it is published
            live = fold(live, event, await bus.publish(event))
        await count_when(bus, lambda n: n == len(scripted_run()))
        args = type("Args", (), {"state_dir": str(tmp_path), "nats_url": fresh_nats.url})()
        replayed = await asyncio.to_thread(load_run, args, "r-live")
        assert replayed == live and replayed.phase == "finalized"
    finally:
        writer.terminate()
        assert writer.wait(10) == 0
        await bus.close()


def test_a_bus_too_slow_to_connect_is_asked_again_when_the_tape_file_shows_its_writer_runs(tmp_path, monkeypatch):
    """On a loaded machine the CLI's 2 s connect can fail while the stack is up; the tape file, locked by the running
    writer, says so, and the query is asked again with a patient connect instead of failing with 'is the stack
    up?' (it failed the LoRA benchmark's tape readings under load ~19)."""
    from argparse import Namespace

    from yeto.cli import tape_query as tq
    from yeto.infra import stack
    from yeto.infra.tape.store import TapeHeldError

    state = tmp_path / "state"
    stack.up(state)
    try:
        args = Namespace(state_dir=str(state), nats_url=None)

        def answers() -> bool:
            try:
                return tq.tape_query(args, "SELECT 1")["rows"] == [[1]]
            except ValueError:                  # its tape writer not subscribed yet
                return False
        wait_for(answers, 60, "the stack's tape writer answering")       # it holds the file from now on
        real, timeouts = tq.connect, []

        async def slow_then_real(url, *, name, connect_timeout):
            timeouts.append(connect_timeout)
            if len(timeouts) == 1:
                raise TimeoutError("nats: timed out connecting (a loaded machine)")
            return await real(url, name=name, connect_timeout=connect_timeout)

        monkeypatch.setattr(tq, "connect", slow_then_real)
        reply = tq.tape_query(args, "SELECT 41 + 1")
        assert reply["rows"] == [[42]] and timeouts == [2.0, tq.PATIENT_CONNECT_S]
        with pytest.raises(TapeHeldError, match="held by a running tape writer"):   # what the first try's fallback met
            from yeto.infra.tape.sql import query_file
            query_file(stack.StackPaths(state).db, "SELECT 1")
    finally:
        stack.down(state)
