"""A user's tape query in a process of its own: a hard memory limit, a wall-clock deadline that kills it, a bounded reply.

DuckDB's `memory_limit` governs its buffer manager, not every allocation (`select list(range(300000000))` took a
process past 4 GB), and an interrupt is only a request. So with the stack down the CLI never runs a user's statement
itself: `run` starts `python -m yeto.infra.tape.query_process`, which caps its own address space (RLIMIT_AS) before it
imports DuckDB, opens the tape file read-only with QUERY_CONFIG, and writes the reply (encoded row by row, refused
past `max_bytes`) to stdout; past `timeout_s` the parent kills it (SIGKILL). The running tape writer answers the same
way, from the same process, over a copy of its tape (responder.py): DuckDB allows one read-write process or several
readers of a file, and a user's query never runs in the writer's process.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MEMORY_BYTES = 3 << 30       # the query process's address space: DuckDB's 1 GB memory limit, its code, and headroom
TIMEOUT_S = 30.0
MAX_REPLY_BYTES = 256 << 20  # a reply read from the file with the stack down (over the bus: the bus's payload limit)
HELD = "held"                # the reply's flag: a tape writer holds the file
SPILL_PREFIX = ".query-spill-"   # a query process's own spill folder (DuckDB's temp_directory), removed with it


def command(memory_bytes: int, spill_dir: Path) -> list[str]:
    """The query process; DuckDB spills into `spill_dir` (a process's own: a killed query's spill is removed with it)."""
    return [sys.executable, "-m", "yeto.infra.tape.query_process", str(memory_bytes), str(spill_dir)]


def request(db: Path | str, sql: str, max_rows: int, max_bytes: int) -> bytes:
    """One request line for query_process.py."""
    return json.dumps({"db": str(db), "sql": sql, "max_rows": max_rows, "max_bytes": max_bytes}).encode() + b"\n"


def killed(timeout_s: float) -> ValueError:
    return ValueError(f"query ran longer than {timeout_s:.0f}s and was stopped (its process killed); "
                      "narrow it, add a LIMIT or aggregate")


def reply(code: int | None, out: bytes, memory_bytes: int) -> bytes:
    """The reply line without its newline; ValueError when the process ended without one."""
    if code not in (0, None) or not out.endswith(b"\n"):
        raise ValueError(f"the query's process ended without an answer (exit {code}): it may have passed its "
                         f"{memory_bytes >> 20} MiB memory limit; narrow the query, add a LIMIT or aggregate")
    return out[:-1]


def run(db: Path | str, sql: str, *, max_rows: int, max_bytes: int = MAX_REPLY_BYTES, timeout_s: float = TIMEOUT_S,
        memory_bytes: int = MEMORY_BYTES) -> bytes:
    """The JSON reply {columns, types, rows, truncated} or {error}; ValueError when the process was killed or died.
    What DuckDB spilled goes with the process (a killed query's spill stayed beside the tape file)."""
    spill = Path(tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=Path(db).parent if Path(db).parent.is_dir() else None))
    try:
        proc = subprocess.Popen(command(memory_bytes, spill), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        try:
            out, _ = proc.communicate(request(db, sql, max_rows, max_bytes), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise killed(timeout_s) from None
        return reply(proc.returncode, out, memory_bytes)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
