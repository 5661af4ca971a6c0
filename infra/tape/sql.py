"""Read-only SQL over the tape: the statement guard, running a query into a JSON-able reply, and the client over the bus.

Only reading statements pass the guard: SELECT (which includes WITH, FROM-first, SHOW, DESCRIBE,
SUMMARIZE), EXPLAIN of a SELECT, and a few catalogue PRAGMAs. Everything else (INSERT, DROP, ATTACH,
COPY, SET, CALL, EXPORT, LOAD, transactions, several statements at once) is refused before it runs.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:
    from yeto.infra.bus import Bus

MAX_ROWS = 100_000
USER, VIEWS = "user", "views"   # a request's lane at the tape writer (lanes.py): `yeto sql`, or the CLI's own views
LANES = (USER, VIEWS)
POSITION = "position"           # a request (and its reply's field) for the writer's last stored seq: no query at all
FETCH = 1024                    # rows taken from DuckDB at a time: a reply is built as its rows come, never whole first
READ_PRAGMAS = {"table_info", "show_tables", "show_tables_expanded", "database_size", "storage_info", "show"}
_EXPLAIN = re.compile(r"^\s*explain\s+(analyze\s+)?", re.IGNORECASE)
_PRAGMA = re.compile(r"^\s*pragma\s+([a-z_]+)", re.IGNORECASE)


class ReadOnlyError(ValueError):
    """The statement would change the tape or its database; the message says what is allowed."""


class NoTapeWriterError(ValueError):
    """Nothing answers on the tape's SQL subject: the stack or its tape writer is down."""


def check_read_only(sql: str) -> None:
    """Raise ReadOnlyError unless `sql` is exactly one reading statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise ValueError(f"SQL does not parse: {e}") from None
    if len(statements) != 1:
        raise ReadOnlyError(f"send exactly one statement (got {len(statements)}); the tape answers one query at a time")
    st = statements[0]
    kind = st.type
    if kind == duckdb.StatementType.SELECT:
        return
    if kind == duckdb.StatementType.EXPLAIN:
        inner_st = duckdb.extract_statements(_EXPLAIN.sub("", st.query, count=1))
        if len(inner_st) == 1 and inner_st[0].type == duckdb.StatementType.SELECT:
            return
        kind = inner_st[0].type if inner_st else kind  # EXPLAIN ANALYZE would run it: name what it explains
    if kind == duckdb.StatementType.PRAGMA:
        m = _PRAGMA.match(st.query)
        if m and m.group(1).lower() in READ_PRAGMAS:
            return
    name = kind.name if hasattr(kind, "name") else str(kind)
    raise ReadOnlyError(f"the tape is read-only: {name} statements are refused. Use SELECT / WITH / SHOW / "
                        f"DESCRIBE / EXPLAIN / PRAGMA table_info('events'); the tape changes only by events "
                        f"published to the stream")


def query_error(e: duckdb.Error) -> str:
    """What a failed query's user reads: a refused file, URL or extension says why it is refused."""
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    if isinstance(e, duckdb.PermissionException):
        return f"refused: {first}. Queries read the tape's tables and views only: no files, URLs or extensions"
    return f"query failed: {first}"


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def execute(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[str], Iterator[list[Any]]]:
    """Run one read-only statement: (columns, types, its rows as JSON-able lists, fetched FETCH at a time)."""
    check_read_only(sql)
    rel = con.execute(sql)
    columns = [d[0] for d in rel.description] if rel.description else []
    types = [str(d[1]) for d in rel.description] if rel.description else []

    def rows() -> Iterator[list[Any]]:
        while batch := rel.fetchmany(FETCH):
            yield from ([_jsonable(v) for v in r] for r in batch)
    return columns, types, rows()


def run_query(con: duckdb.DuckDBPyConnection, sql: str, *, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """Run one read-only statement; the reply is {columns, types, rows, truncated} with JSON-able values."""
    columns, types, it = execute(con, sql)
    rows = [r for _, r in zip(range(max_rows + 1), it)]
    return {"columns": columns, "types": types, "rows": rows[:max_rows], "truncated": len(rows) > max_rows}


def query_file(path, sql: str, *, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """Answer a query from the tape file itself (the stack is down), in a process of its own with a memory limit and
    a deadline (sandbox.py). TapeHeldError when a running tape writer holds the file."""
    from yeto.infra.tape import sandbox
    from yeto.infra.tape.store import TapeHeldError

    check_read_only(sql)                    # refused here, before a process is started for it
    reply = json.loads(sandbox.run(path, sql, max_rows=max_rows))
    if "error" in reply:
        raise (TapeHeldError if reply.get(sandbox.HELD) else ValueError)(reply["error"])
    return reply


async def ask(bus: Bus, sql: str, *, timeout: float = 30.0, max_rows: int = MAX_ROWS, lane: str = USER) -> dict[str, Any]:
    """Ask the running tape writer over the bus (request/reply) in `lane` (USER or VIEWS: the CLI's own views). Raises
    ValueError with the writer's error."""
    return await _request(bus, {"sql": sql, "max_rows": max_rows, "lane": lane}, timeout,
                          "narrow the query or add a LIMIT")


async def position(bus: Bus, *, timeout: float = 5.0) -> int:
    """The running tape writer's position (its last stored seq), answered by the writer itself: no copy of the tape,
    no query process, so it comes while every query worker is busy (the tape's health line, infra/stack/health.py)."""
    return int((await _request(bus, {POSITION: True}, timeout, "is it stuck? its log: <state>/logs/tape.log"))[POSITION])


async def _request(bus: Bus, body: dict[str, Any], timeout: float, advice: str) -> dict[str, Any]:
    from yeto.infra.bus import NoResponders  # here: a query process imports this module, never the bus's schemas
    from yeto.schemas.subjects import TAPE_SQL
    try:
        data = await bus.request(TAPE_SQL, json.dumps(body).encode(), timeout_s=timeout)
    except NoResponders:
        raise NoTapeWriterError(f"no tape writer answers on {TAPE_SQL}: is the stack up? (`yeto stack status`)") from None
    except TimeoutError:
        raise ValueError(f"the tape writer did not answer within {timeout:.0f}s; {advice}") from None
    reply: dict[str, Any] = json.loads(data)
    if "error" in reply:
        raise ValueError(reply["error"])
    return reply
