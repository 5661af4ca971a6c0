"""The tape writer's SQL service: answers read-only queries on `yeto.tape.sql` from a cursor of its own."""
from __future__ import annotations

import asyncio
import json

import duckdb

from yeto.infra.tape_sql import MAX_ROWS, run_query
from yeto.infra.tape_store import TapeStore


def _query_then_close(cur: duckdb.DuckDBPyConnection, sql: str, max_rows: int) -> dict:
    try:
        return run_query(cur, sql, max_rows=max_rows)
    finally:
        cur.close()


async def answer(request: bytes, store: TapeStore, *, timeout_s: float, max_payload: int) -> bytes:
    """Reply {columns, types, rows, truncated}, or {error} saying what to change; never raises."""
    try:
        req = json.loads(request)
        sql, max_rows = req["sql"], min(int(req.get("max_rows", MAX_ROWS)), MAX_ROWS)
        cur = store.reader()
        try:
            reply = await asyncio.wait_for(asyncio.to_thread(_query_then_close, cur, sql, max_rows), timeout_s)
        except asyncio.TimeoutError:
            cur.interrupt()
            raise ValueError(f"query ran longer than {timeout_s:.0f}s and was interrupted") from None
        data = json.dumps(reply).encode()
        if len(data) > max_payload:
            raise ValueError(f"result is {len(data)} bytes, over the bus limit; add a LIMIT or aggregate")
    except (ValueError, KeyError, TypeError, duckdb.Error) as e:
        data = json.dumps({"error": str(e) if not isinstance(e, KeyError) else "request needs an 'sql' field"}).encode()
    return data
