"""Queries that stop (issue 41): `select list(range(300000000))` took a process past 4 GB, and with the stack down a
query had no time limit at all. With the stack down, `yeto sql`, `yeto status` and the rest read the tape file in a
process of their own (infra/tape/sandbox.py): it is stopped within its deadline + 2 s, stays under its memory limit,
and the CLI's own memory does not move. With the stack up, the tape writer runs each query the same way over a copy of
its tape (infra/tape/responder.py): the writer's memory does not move either, and it goes on answering, several queries
at once: one running to its deadline holds back no quick one."""
from __future__ import annotations

import asyncio
import resource
import time
from pathlib import Path

import pytest

from hostile_stack import QUERY_TIMEOUT_S
from waiting import until_answered, wait_for
from yeto.cli.main import main
from yeto.infra.bus import connect
from yeto.infra.tape import sandbox
from yeto.infra.tape.responder import POOL, VIEWS_POOL, snapshot_dir
from yeto.infra.tape.sql import ask, query_file
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes
from yeto.schemas.fleet import RunLaunched

pytestmark = pytest.mark.timeout(120)
HUGE = "select list(range(300000000))"          # ~2.4 GB of one value: past DuckDB's memory_limit's reach
ENDLESS = "select count(*) from range(1000000000000) t, range(10) u"


@pytest.fixture
def tape(tmp_path):
    db = tmp_path / "home" / "tape.duckdb"
    store = TapeStore(db)
    events = [RunLaunched(run_id="r-q", fleet=[], recipe={})]
    store.append(list(range(1, len(events) + 1)), [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    store.close()
    return db


def test_a_query_on_the_tape_file_is_killed_at_its_deadline_and_kept_under_its_memory_limit(tape):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert query_file(tape, "select count(*) from events where run_id = 'r-q'")["rows"][0][0] > 0
    start = time.monotonic()
    with pytest.raises(ValueError, match="(?i)memory"):
        query_file(tape, HUGE)
    huge_s = time.monotonic() - start
    start = time.monotonic()
    with pytest.raises(ValueError, match="killed"):
        sandbox.run(tape, ENDLESS, max_rows=10, timeout_s=2.0)
    endless_s = time.monotonic() - start
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    print(f"huge refused in {huge_s:.1f}s, endless killed after {endless_s:.1f}s, this process grew {grew:.0f} MiB")
    assert endless_s < 2.0 + 2 and grew < 64, "the query's memory is its own process's, never the caller's"


def test_the_cli_with_the_stack_down_answers_and_refuses_through_the_sandbox(tape, capsys):
    state = str(tape.parent)
    assert main(["--state-dir", state, "sql", "select count(*) as n from events"]) == 0
    assert "(1 row)" in capsys.readouterr().out
    assert main(["--state-dir", state, "sql", HUGE]) != 0
    assert "memory" in capsys.readouterr().err.lower()


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM")}


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_with_the_stack_up_a_query_runs_outside_the_tape_writer_and_is_killed_at_its_deadline(live_stack, capsys):
    srv, state, writer = live_stack
    cli = ["--state-dir", str(state), "--nats-url", srv.url, "sql"]
    wait_for(lambda: main(cli + ["select count(*) as n from events"]) == 0, 60, "the tape writer answering")
    capsys.readouterr()
    before = _status(writer.pid)
    timings = {}
    for name, sql in (("huge", HUGE), ("endless", ENDLESS)):
        start = time.monotonic()
        assert main(cli + [sql]) != 0
        timings[name] = time.monotonic() - start
        err = capsys.readouterr().err
        assert ("memory" in err.lower()) if name == "huge" else ("killed" in err), err
    after = _status(writer.pid)
    grew = (after["VmHWM"] - before["VmHWM"]) / 1024
    with capsys.disabled():
        print(f"huge refused in {timings['huge']:.1f}s, endless killed after {timings['endless']:.1f}s (deadline "
              f"{QUERY_TIMEOUT_S:.0f}s); the writer's RSS {before['VmRSS'] >> 10} -> {after['VmRSS'] >> 10} MiB, "
              f"peak +{grew:.0f} MiB")
    assert timings["endless"] < QUERY_TIMEOUT_S + 2 and timings["huge"] < QUERY_TIMEOUT_S + 2
    assert grew < 64, "a user's query never runs in the tape writer's process"
    assert len(_children(writer.pid)) <= POOL + VIEWS_POOL, "no query process outlives its query (the pool waits for the next)"
    assert main(cli + ["select count(*) as n from events"]) == 0 and "(1 row)" in capsys.readouterr().out
    assert writer.poll() is None
    assert len(list(snapshot_dir(Path(state) / "tape.duckdb").glob("*.duckdb"))) == 1, "one copy of the tape is kept"


def test_with_the_stack_up_a_query_at_its_deadline_holds_back_no_quick_one(live_stack):
    """The endless join is asked first, a count right after it on the same connection (so the writer receives them in
    that order): the count's answer comes back first, the join is killed at its deadline after it, and the writer
    keeps at most its pool of query processes. Answered one at a time (as before), the count waited behind the join."""
    srv, state, writer = live_stack

    async def race() -> list[tuple[str, str]]:
        bus = await connect(srv.url, name="operator")
        order: list[tuple[str, str]] = []

        async def one(name: str, sql: str) -> None:
            try:
                reply = await ask(bus, sql, timeout=QUERY_TIMEOUT_S + 60)
                order.append((name, f"{reply['rows'][0][0]} rows"))
            except ValueError as e:
                order.append((name, str(e)))
        try:
            await until_answered(lambda: ask(bus, "select count(*) from events"), 60, "the tape writer answering")
            slow = asyncio.create_task(one("endless", ENDLESS))
            quick = asyncio.create_task(one("count", "select count(*) from events"))
            await asyncio.gather(slow, quick)
            return order
        finally:
            await bus.close()

    order = asyncio.run(race())
    assert [name for name, _ in order] == ["count", "endless"], order
    assert order[0][1].endswith("rows") and "killed" in order[1][1], order
    assert len(_children(writer.pid)) <= POOL + VIEWS_POOL and writer.poll() is None
