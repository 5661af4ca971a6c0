"""The query process sandbox.py starts: caps its own address space, then answers queries from the tape file, one a line.

It loads DuckDB before it reads a request, so the tape writer keeps one started ahead, and answers one request after
another until its stdin ends (responder.py's worker; the CLI's sandbox.run sends one). A request is one JSON line on
stdin, {db, sql, max_rows, max_bytes}; its reply one JSON line on stdout, {columns, types, rows, truncated} or {error},
with `held` set when a running tape writer holds the file (JSON text holds no raw newline).
"""
from __future__ import annotations

import json
import resource
import sys
from typing import Any

from yeto.infra.tape.sandbox import HELD


def answer(req: dict[str, Any], spill_dir: str | None = None) -> bytes:
    import duckdb

    from yeto.infra.tape.responder import encode_reply
    from yeto.infra.tape.sql import query_error
    from yeto.infra.tape.store import TapeHeldError, open_read_only
    try:
        con = open_read_only(req["db"], spill_dir)
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
    limit, spill_dir = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else None)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))      # before DuckDB is loaded: everything counts
    import duckdb  # noqa: F401 - loaded before a request is read: the writer keeps a worker (responder.py) warm

    import yeto.infra.tape.responder
    import yeto.infra.tape.store  # noqa: F401
    for line in sys.stdin.buffer:
        sys.stdout.buffer.write(answer(json.loads(line), spill_dir) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
