"""The DuckDB tape on plain data: atomic appends keyed by seq, nothing dropped, the views, the read-only guard."""
from __future__ import annotations

import duckdb
import pytest

from tape_events import SCRIPTED_SPEND, scripted_run
from yeto.infra.tape.sql import ReadOnlyError, check_read_only, query_file, run_query
from yeto.infra.tape.store import TapeStore, open_read_only
from yeto.schemas.base import to_bytes


def store_with(path, events, start: int = 1) -> TapeStore:
    store = TapeStore(path)
    raws = [to_bytes(e).decode() for e in events]
    store.append(list(range(start, start + len(raws))), [e.run_id for e in events], raws)
    return store


def test_appended_rows_carry_the_envelope_and_the_position_survives_reopening(tmp_path):
    events = scripted_run()
    store_with(tmp_path / "t.duckdb", events).close()
    store = TapeStore(tmp_path / "t.duckdb")
    assert store.last_seq == len(events)
    row = store.con.execute("SELECT seq, ts, run_id, type, version, source, payload->>'id' "
                            "FROM events WHERE seq = 7").fetchall()[0]
    assert row[0] == 7 and row[1] == events[6].ts and row[2:] == ("r-demo", "RoundMerged", events[6].version, "syncer",
                                                                   "r-demo-m0")
    with pytest.raises(AssertionError):   # a batch overlapping the tape is a bug, never silently duplicated
        store.append([3], ["r-demo"], ["{}"])


def test_a_payload_that_does_not_parse_is_stored_not_dropped(tmp_path):
    store = TapeStore(tmp_path / "t.duckdb")
    store.append([1, 2, 3], ["r-x", "r-x", "r-x"], ['{not json', '[1, 2]', '{"type": "Odd", "note": "no version"}'])
    rows = store.con.execute("SELECT seq, run_id, type, version, payload FROM events ORDER BY seq").fetchall()
    # valid JSON is kept verbatim; text that is not JSON is kept as a JSON string of itself
    assert rows == [(1, "r-x", "unparsable", None, '"{not json"'), (2, "r-x", "unparsable", None, "[1, 2]"),
                    (3, "r-x", "Odd", None, '{"type": "Odd", "note": "no version"}')]


def test_views_answer_rounds_progress_and_spend_from_the_payloads(tmp_path):
    store = store_with(tmp_path / "t.duckdb", scripted_run())
    q = lambda sql: store.con.execute(sql).fetchall()  # noqa: E731
    assert q("SELECT fragment, global_version, num_responders FROM rounds ORDER BY seq") == [(0, 1, 2), (1, 1, 2), (0, 2, 2)]
    assert q("SELECT learner, step, loss FROM learner_progress ORDER BY seq")[-1] == ("island-1", 5, 1.8)
    assert q("SELECT run_id, phase, num_rounds FROM runs") == [("r-demo", "finalized", 3)]
    (usd, open_), = q("SELECT usd, num_open FROM spend")
    assert usd == pytest.approx(SCRIPTED_SPEND) and open_ == 0
    assert q("SELECT island, hours FROM island_uptime ORDER BY island, up_at") == [("0", 1.0), ("1", 0.5), ("1", 20 / 60)]


@pytest.mark.parametrize("sql", [
    "INSERT INTO events VALUES (99, now(), 'r', 't', 1, 's', '{}')", "DROP TABLE events", "DELETE FROM events",
    "UPDATE events SET type = 'x'", "ATTACH 'other.db'", "COPY events TO 'out.csv'", "SET threads = 1",
    "CREATE TABLE x (a INT)", "EXPORT DATABASE 'dir'", "CALL pragma_version()", "CHECKPOINT", "INSTALL httpfs",
    "BEGIN", "SELECT 1; DROP TABLE events", "EXPLAIN ANALYZE DELETE FROM events", "PRAGMA enable_profiling",
])
def test_statements_that_write_or_configure_are_refused(sql):
    with pytest.raises(ReadOnlyError, match="read-only|one statement"):
        check_read_only(sql)


@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM events", "WITH a AS (SELECT 1) SELECT * FROM a", "FROM events", "SHOW TABLES",
    "DESCRIBE events", "EXPLAIN SELECT * FROM events", "PRAGMA table_info('events')", "SUMMARIZE events",
])
def test_reading_statements_pass_and_run(tmp_path, sql):
    store = store_with(tmp_path / "t.duckdb", scripted_run())
    reply = run_query(store.reader(), sql)
    assert reply["columns"] and isinstance(reply["rows"], list)


def test_the_file_is_queried_read_only_when_the_stack_is_down(tmp_path):
    store_with(tmp_path / "t.duckdb", scripted_run()).close()
    reply = query_file(tmp_path / "t.duckdb", "SELECT type, count(*) AS n FROM events GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 2")
    assert reply["columns"] == ["type", "n"] and reply["rows"] == [["LearnerProgress", 3], ["RoundMerged", 3]]
    con = open_read_only(tmp_path / "t.duckdb")
    with pytest.raises(duckdb.Error):   # read-only at the DuckDB level too, below the guard
        con.execute("DELETE FROM events")
    with pytest.raises(ValueError, match="no tape at"):
        open_read_only(tmp_path / "missing.duckdb")
