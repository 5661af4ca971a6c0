"""The DuckDB side of the tape: the `events` table, its views, and atomic batch appends keyed by stream sequence.

The stream sequence is the primary key, so the tape's position (max(seq)) is stored by the very
statement that stores the rows: a batch is one INSERT, committed or not as a whole.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

SCHEMA = """CREATE TABLE IF NOT EXISTS events (
    seq BIGINT PRIMARY KEY, ts TIMESTAMPTZ, run_id VARCHAR, type VARCHAR, version INTEGER,
    source VARCHAR, payload JSON, subject VARCHAR, learner VARCHAR, forged VARCHAR)"""
# A tape made before the subject's columns: they are added, NULL for its old rows (their run and type were the payload's).
_UPGRADE = [f"ALTER TABLE events ADD COLUMN IF NOT EXISTS {name} VARCHAR" for name in ("subject", "learner", "forged")]

# Every connection that answers queries: no files, no network, no extensions, bounded memory and spill, locked.
QUERY_CONFIG = {"enable_external_access": False, "autoinstall_known_extensions": False,
                "autoload_known_extensions": False, "memory_limit": "1GB", "max_temp_directory_size": "4GB",
                "lock_configuration": True}

BATCH_COLUMNS = ("seq", "subject", "raw", "note")   # seq BIGINT, the rest VARCHAR

# DuckDB parses each payload once (json_extract_string with a list of paths) in vectorized C++, which
# is several times faster than json.loads per message in Python. A payload that is not valid JSON is
# kept as a JSON string of its text, so nothing is dropped; its type reads 'unparsable'.
# The run, type and learner are the subject's (`yeto.evt.<run>.<Type>[.<learner>]`), which the server's permissions
# vouch for, never the payload's claims: a payload that claims another run, type or learner than its subject is
# stored as published with `forged` saying why, and the views leave it out (docs/TAPE.md). A bare run id in place
# of a subject (a tape filled by a test or a tool, not from the stream) keeps the payload's type and learner.
_APPEND = """INSERT INTO events (seq, ts, run_id, type, version, source, payload, subject, learner, forged)
SELECT seq, try_cast(f[1] AS TIMESTAMPTZ), coalesce(nullif(s_run, ''), f[2], '_'),
       CASE WHEN note IS NOT NULL THEN coalesce(s_type, 'unparsable') WHEN f[3] IS NULL THEN 'unparsable'
            ELSE coalesce(s_type, f[3]) END,
       try_cast(f[4] AS INTEGER), f[5], j, subject, coalesce(s_learner, CASE WHEN s_type IS NULL THEN f[6] END),
       CASE WHEN note IS NOT NULL THEN note WHEN f[3] IS NULL THEN NULL
            WHEN s_run <> '' AND f[2] IS DISTINCT FROM s_run
                 THEN 'the payload names run ' || coalesce(f[2], 'none') || ' on a subject of run ' || s_run
            WHEN f[3] <> s_type THEN 'the payload is a ' || f[3] || ' on a ' || s_type || ' subject'
            WHEN s_learner IS NOT NULL AND f[6] IS DISTINCT FROM s_learner
                 THEN 'the payload names learner ' || coalesce(f[6], 'none') || ' on the subject of ' || s_learner END
FROM (SELECT seq, subject, note, j,
             CASE WHEN is_evt THEN split_part(subject, '.', 3) ELSE subject END AS s_run,
             CASE WHEN is_evt THEN nullif(split_part(subject, '.', 4), '') END AS s_type,
             CASE WHEN is_evt THEN nullif(split_part(subject, '.', 5), '') END AS s_learner,
             CASE WHEN json_type(j) = 'OBJECT'
                  THEN json_extract_string(j, ['$.ts', '$.run_id', '$.type', '$.version', '$.source', '$.learner'])
                  ELSE [NULL, NULL, NULL, NULL, NULL, NULL] END AS f
      FROM (SELECT seq, subject, note, starts_with(subject, 'yeto.evt.') AS is_evt,
                   CASE WHEN json_valid(raw) THEN raw::JSON ELSE to_json(raw) END AS j
            FROM tape_batch))
ORDER BY seq"""


class TapeStore:
    """The read-write tape file. One per process: DuckDB allows one writer process per file."""

    def __init__(self, path: Path | str):
        from yeto.infra.tape.views import VIEWS  # here: a query process (query_process.py) imports only DuckDB's side
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(str(self.path))
        self.con.execute(SCHEMA)
        for statement in _UPGRADE:
            self.con.execute(statement)
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

    def append(self, seqs: list[int], subjects: list[str], raws: list[str], notes: list[str | None] | None = None) -> int:
        """Store one batch atomically; the caller has filtered it to seqs after `last_seq`. `subjects`: what each came
        on (a bare run id: see _APPEND); `notes`: why the writer stored a stub in an event's place (limits.py), its
        `forged`. Returns the new last seq."""
        import pyarrow as pa
        assert seqs and seqs[0] > self.last_seq, f"batch starts at {seqs[0] if seqs else None}, tape is at {self.last_seq}"
        batch = pa.Table.from_arrays([pa.array(seqs, pa.int64()), pa.array(subjects, pa.string()),
                                      pa.array(raws, pa.string()), pa.array(notes or [None] * len(seqs), pa.string())],
                                     names=list(BATCH_COLUMNS))
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


def open_read_only(path: Path | str, spill_dir: Path | str | None = None) -> duckdb.DuckDBPyConnection:
    """Open the tape file read-only (the stack is down, or a query worker's copy). Errors say what to do. `spill_dir`:
    where DuckDB spills (default: beside the file), so whoever kills the process can remove what it left."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no tape at {path}: no tape writer has created it (a stack's does when the stack starts)")
    try:
        spill = {} if spill_dir is None else {"temp_directory": str(spill_dir)}
        return duckdb.connect(str(path), read_only=True, config={**QUERY_CONFIG, **spill})
    except duckdb.IOException as e:
        raise TapeHeldError(f"the tape {path} is held by a running tape writer ({e}); "
                         f"ask it through the stack (is `yeto stack status` up? pass --nats-url)") from None
