"""The DuckDB side of the tape: the `events` table, its views, and atomic batch appends keyed by stream sequence.

The stream sequence is the primary key, so the tape's position (max(seq)) is stored by the very
statement that stores the rows: a batch is one INSERT, committed or not as a whole.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from yeto.infra.tape.views import VIEWS

SCHEMA = """CREATE TABLE IF NOT EXISTS events (
    seq BIGINT PRIMARY KEY, ts TIMESTAMPTZ, run_id VARCHAR, type VARCHAR, version INTEGER,
    source VARCHAR, payload JSON)"""

# Every connection that answers queries: no files, no network, no extensions, bounded memory and spill, locked.
QUERY_CONFIG = {"enable_external_access": False, "autoinstall_known_extensions": False,
                "autoload_known_extensions": False, "memory_limit": "1GB", "max_temp_directory_size": "4GB",
                "lock_configuration": True}

BATCH_SCHEMA = pa.schema([("seq", pa.int64()), ("subject_run", pa.string()), ("raw", pa.string())])

# DuckDB parses each payload once (json_extract_string with a list of paths) in vectorized C++, which
# is several times faster than json.loads per message in Python. A payload that is not valid JSON is
# kept as a JSON string of its text, so nothing is dropped; its type reads 'unparsable'.
_APPEND = """INSERT INTO events
SELECT seq, try_cast(f[1] AS TIMESTAMPTZ), coalesce(f[2], subject_run), coalesce(f[3], 'unparsable'),
       try_cast(f[4] AS INTEGER), f[5], j
FROM (SELECT seq, subject_run, j,
             CASE WHEN json_type(j) = 'OBJECT'
                  THEN json_extract_string(j, ['$.ts', '$.run_id', '$.type', '$.version', '$.source'])
                  ELSE [NULL, NULL, NULL, NULL, NULL] END AS f
      FROM (SELECT seq, subject_run, CASE WHEN json_valid(raw) THEN raw::JSON ELSE to_json(raw) END AS j
            FROM tape_batch))
ORDER BY seq"""


def subject_run(subject: str) -> str:
    """The run id token of an event subject `yeto.evt.<run_id>.<Type>` ('' if the subject is shorter)."""
    parts = subject.split(".", 3)
    return parts[2] if len(parts) > 2 else ""


class TapeStore:
    """The read-write tape file. One per process: DuckDB allows one writer process per file."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(str(self.path))
        self.con.execute(SCHEMA)
        for name, body in VIEWS.items():
            self.con.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")
        self.con.execute("CHECKPOINT")
        # Queries from the bus must not read files, load extensions, take the machine's memory or disk, or change
        # settings; the writer's own appends do none of these.
        for name, value in QUERY_CONFIG.items():
            self.con.execute(f"SET {name} = {value!r}" if isinstance(value, str) else f"SET {name} = {str(value).lower()}")
        self._readers = self.con.cursor()   # the only connection other threads' cursors are made from
        self.last_seq = self.max_seq()

    def max_seq(self) -> int:
        return int(self.con.execute("SELECT coalesce(max(seq), 0) FROM events").fetchall()[0][0])

    def append(self, seqs: list[int], subject_runs: list[str], raws: list[str]) -> int:
        """Store one batch atomically; the caller has filtered it to seqs after `last_seq`. Returns the new last seq."""
        assert seqs and seqs[0] > self.last_seq, f"batch starts at {seqs[0] if seqs else None}, tape is at {self.last_seq}"
        batch = pa.Table.from_arrays([pa.array(seqs, pa.int64()), pa.array(subject_runs, pa.string()),
                                      pa.array(raws, pa.string())], schema=BATCH_SCHEMA)
        self.con.register("tape_batch", batch)
        try:
            self.con.execute(_APPEND).fetchall()  # DuckDB 2 wants the row count consumed before the next statement
        finally:
            self.con.unregister("tape_batch")
        self.last_seq = seqs[-1]
        return self.last_seq

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A separate cursor on the same database for read-only queries from another thread."""
        return self._readers.cursor()

    def close(self) -> None:
        self.con.close()


class TapeHeldError(ValueError):
    """The tape file is locked by a running tape writer: ask it over the bus instead."""


def open_read_only(path: Path | str) -> duckdb.DuckDBPyConnection:
    """Open the tape file read-only (the stack is down). Errors say what to do."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no tape at {path}: nothing has run under this state directory yet "
                         f"(start one with `yeto stack up`, or pass --state-dir)")
    try:
        return duckdb.connect(str(path), read_only=True, config=dict(QUERY_CONFIG))
    except duckdb.IOException as e:
        raise TapeHeldError(f"the tape {path} is held by a running tape writer ({e}); "
                         f"ask it through the stack (is `yeto stack status` up? pass --nats-url)") from None
