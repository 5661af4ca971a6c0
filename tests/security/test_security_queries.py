"""Queries that stop (issue 41): `select list(range(300000000))` took a process past 4 GB, and with the stack down a
query had no time limit at all. With the stack down, `yeto sql`, `yeto status` and the rest read the tape file in a
process of their own (infra/tape/sandbox.py): it is stopped within its deadline + 2 s, stays under its memory limit,
and the CLI's own memory does not move."""
from __future__ import annotations

import resource
import time

import pytest

from yeto.cli.main import main
from yeto.infra.tape import sandbox
from yeto.infra.tape.sql import query_file
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
