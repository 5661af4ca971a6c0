"""The query process sandbox.py starts: caps its own address space, then answers one query from the tape file on stdout.

It loads DuckDB before it reads its request, so the tape writer keeps one started ahead (responder.py).
Its request (JSON on stdin): {db, sql, max_rows, max_bytes}; its reply: {columns, types, rows, truncated} or {error},
with `held` set when a running tape writer holds the file.
"""
from __future__ import annotations

import json
import resource
import sys
from typing import Any

from yeto.infra.tape.sandbox import HELD


def answer(req: dict[str, Any]) -> bytes:
    import duckdb

    from yeto.infra.tape.responder import encode_reply
    from yeto.infra.tape.sql import query_error
    from yeto.infra.tape.store import TapeHeldError, open_read_only
    try:
        con = open_read_only(req["db"])
    except TapeHeldError as e:
        return json.dumps({"error": str(e), HELD: True}).encode()
    except ValueError as e:
        return json.dumps({"error": str(e)}).encode()
    try:
        return encode_reply(con, req["sql"], max_rows=req["max_rows"], max_bytes=req["max_bytes"])
    except duckdb.Error as e:
        return json.dumps({"error": query_error(e)}).encode()
    except ValueError as e:
        return json.dumps({"error": str(e)}).encode()
    finally:
        con.close()


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))      # before DuckDB is loaded: everything counts
    import duckdb  # noqa: F401 - loaded before the request is read: a spare process (responder.py) waits warm

    import yeto.infra.tape.responder
    import yeto.infra.tape.store  # noqa: F401
    sys.stdout.buffer.write(answer(json.loads(sys.stdin.buffer.read())))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
