"""The tape writer's SQL service: answers read-only queries on `yeto.tape.sql` from a cursor of its own.

A reply is encoded row by row as DuckDB produces the rows and refused the moment it passes the bus's
payload limit: a huge result never exists whole in this process (DuckDB's own memory and spill are capped
by QUERY_CONFIG on the connection).
"""
from __future__ import annotations

import asyncio
import json

import duckdb

from yeto.infra.tape.sql import MAX_ROWS, execute, query_error
from yeto.infra.tape.store import TapeStore

ENVELOPE_BYTES = 1024   # headroom for the reply's subject and headers within max_payload


def encode_reply(cur: duckdb.DuckDBPyConnection, sql: str, *, max_rows: int, max_bytes: int) -> bytes:
    """The JSON reply {columns, types, rows, truncated}, built as rows arrive; ValueError once it passes max_bytes."""
    columns, types, rows = execute(cur, sql)
    parts = [json.dumps({"columns": columns, "types": types})[:-1].encode() + b', "rows": [']
    size, n, truncated = len(parts[0]) + 32, 0, False
    for row in rows:
        if n == max_rows:
            truncated = True
            break
        part = (b", " if n else b"") + json.dumps(row).encode()
        size += len(part)
        if size > max_bytes:
            raise ValueError(f"the result passed {max_bytes} bytes, the most one reply carries on the bus, after {n} "
                             f"rows; stopped there. Add a LIMIT, select fewer columns or aggregate (or page by seq)")
        parts.append(part)
        n += 1
    parts.append(b'], "truncated": ' + (b"true" if truncated else b"false") + b"}")
    return b"".join(parts)


def _query_then_close(cur: duckdb.DuckDBPyConnection, sql: str, max_rows: int, max_bytes: int) -> bytes:
    try:
        return encode_reply(cur, sql, max_rows=max_rows, max_bytes=max_bytes)
    finally:
        cur.close()


async def answer(request: bytes, store: TapeStore, *, timeout_s: float, max_payload: int) -> bytes:
    """Reply {columns, types, rows, truncated}, or {error} saying what to change; never raises."""
    try:
        req = json.loads(request)
        sql, max_rows = req["sql"], max(0, min(int(req.get("max_rows", MAX_ROWS)), MAX_ROWS))
        if not isinstance(sql, str):
            raise TypeError("'sql' must be a string")
        cur = store.reader()
        try:
            return await asyncio.wait_for(asyncio.to_thread(_query_then_close, cur, sql, max_rows,
                                                            max_payload - ENVELOPE_BYTES), timeout_s)
        except asyncio.TimeoutError:
            cur.interrupt()
            raise ValueError(f"query ran longer than {timeout_s:.0f}s and was interrupted") from None
    except duckdb.Error as e:
        return json.dumps({"error": query_error(e)}).encode()
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        text = str(e) if not isinstance(e, KeyError) else "request needs an 'sql' field"
        return json.dumps({"error": text}).encode()
