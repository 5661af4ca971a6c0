"""Queries that stop take their spill with them (issue 41 item 4): DuckDB spills past its 1 GB memory limit (up to 4 GB a
query), and a query killed at its deadline left what it had spilled on disk, beside the tape's copy until the tape moved
(1.2 GB from one `select distinct` on a live stack) and beside the tape file itself with the stack down, for good. Each
query process now spills into a folder of its own that goes with it (infra/tape/sandbox.py, lanes.py).

The query process is killed here by the test once it spills (SIGKILL, as its deadline or the kernel's memory limit
kill it): a deadline alone raced the machine, a fast one reaching DuckDB's 4 GB spill cap before a 45 s deadline and a
slow one not spilling by then."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

import psutil
import pytest

from waiting import until_answered, wait_for
from yeto.infra.bus import connect
from yeto.infra.stack import StackPaths
from yeto.infra.tape import sandbox
from yeto.infra.tape.responder import snapshot_dir
from yeto.infra.tape.sql import ask
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes
from yeto.schemas.fleet import RunLaunched

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
SPILLING = "select count(*) from (select distinct hash(range) h from range(4000000000))"   # ~100 s of spill here
DEADLINE_S = 240.0  # never reached: the test kills the query process once it spills


def _spilled(folder: Path) -> list[Path]:
    """DuckDB's spill files under `folder` (its `..._owner` marker aside), those with bytes in them."""
    return [p for p in folder.rglob("duckdb_temp_*") if "storage" in p.name and p.stat().st_size > 0]


def _any_spill_file(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("duckdb_temp_*")]


def kill_the_spilling_query(ancestor: int, folder: Path) -> int:
    """SIGKILL the query process (a descendant of `ancestor`, a process this test started) whose own spill folder
    holds the spill under `folder`; its pid."""
    spilled = [str(p) for p in _spilled(folder)]
    for proc in psutil.Process(ancestor).children(recursive=True):
        argv = proc.cmdline()
        if "yeto.infra.tape.query_process" in argv and any(f.startswith(argv[-1]) for f in spilled):
            os.kill(proc.pid, signal.SIGKILL)
            return proc.pid
    raise AssertionError(f"no query process of {ancestor} spills into {spilled}")


@pytest.mark.parametrize("live_stack", [DEADLINE_S], indirect=True)
def test_a_query_killed_while_it_spills_leaves_nothing_beside_the_tape_copy(live_stack):
    srv, state, writer = live_stack
    copies = snapshot_dir(StackPaths(state).db)

    async def scene() -> str:
        bus = await connect(srv.url, name="operator")
        try:
            await until_answered(lambda: ask(bus, "select count(*) from events"), 60, "the tape writer answering")
            query = asyncio.create_task(ask(bus, SPILLING, timeout=DEADLINE_S + 60))
            await asyncio.to_thread(wait_for, lambda: _spilled(copies), 120, "the query spilling")
            kill_the_spilling_query(writer.pid, copies)
            with pytest.raises(ValueError) as killed:
                await query
            return str(killed.value)
        finally:
            await bus.close()

    assert "ended without an answer" in asyncio.run(scene())
    wait_for(lambda: not _any_spill_file(copies), 30, "the killed query's spill removed",
             detail=lambda: "\n".join(map(str, _any_spill_file(copies))))
    assert writer.poll() is None


def test_with_the_stack_down_a_query_killed_while_it_spills_leaves_nothing_beside_the_tape(tmp_path):
    db = tmp_path / "home" / "tape.duckdb"
    store = TapeStore(db)
    event = RunLaunched(run_id="r-q", fleet=[], recipe={})
    store.append([1], [event.run_id], [to_bytes(event).decode()])
    store.close()
    outcome: list[str] = []

    def run() -> None:
        try:
            sandbox.run(db, SPILLING, max_rows=10, timeout_s=DEADLINE_S)
            outcome.append("answered")
        except ValueError as e:
            outcome.append(str(e))
    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_for(lambda: _spilled(db.parent), 120, "the query spilling")
        kill_the_spilling_query(os.getpid(), db.parent)
    finally:
        thread.join()
    assert "ended without an answer" in outcome[0], outcome
    assert not _any_spill_file(db.parent) and not list(db.parent.glob(f"{sandbox.SPILL_PREFIX}*"))
