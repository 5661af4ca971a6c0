"""The tape writer's SQL service on `yeto.tape.sql`: each query runs in a sandboxed process of its own over a read-only
copy of the tape, never in the writer's process.

DuckDB lets one process hold a file read-write and no other process read it meanwhile, and its `memory_limit` does not
bound every allocation (`select list(range(300000000))` took the writer past 4 GB, and an interrupt is only a request).
So a query is answered by sandbox.py's process (RLIMIT_AS, killed at the deadline) reading a snapshot: under the
writer's flush lock (no INSERT in flight) the tape is CHECKPOINTed and its file copied by `cp`, once per tape position
(a query on an unchanged tape reuses the copy). Query processes are a small pool of workers (POOL) started ahead and
kept: each answers one query after another, so a query pays neither the interpreter's nor DuckDB's start, and queries
are answered concurrently, so one running to its deadline holds back no other while a worker is free (the bus serves
POOL requests at once); past its deadline a worker is killed and its replacement started at once. A reply is encoded
row by row and refused the moment it passes the bus's payload limit.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from yeto.infra.tape import sandbox
from yeto.infra.tape.sql import MAX_ROWS, check_read_only, execute

if TYPE_CHECKING:
    from yeto.infra.tape.store import TapeStore

ENVELOPE_BYTES = 1024   # headroom for the reply's subject and headers within max_payload
POOL = 3                # query workers: ~40 MiB RSS each idle (DuckDB loaded), each capped by sandbox.MEMORY_BYTES


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


def snapshot_dir(db: Path) -> Path:
    """Where the writer keeps the read-only copies its queries read (removed and made again at each start)."""
    return db.parent / f"{db.stem}-read"


class Responder:
    """Answers the tape's SQL requests for a running writer. `lock`: the writer's flush lock (no append while held).
    Made inside the writer's event loop: it starts the query worker at once."""

    def __init__(self, store: TapeStore, lock: asyncio.Lock, *, timeout_s: float, max_payload: int,
                 memory_bytes: int = sandbox.MEMORY_BYTES, pool: int = POOL):
        self.store, self.lock, self.timeout_s, self.memory_bytes = store, lock, timeout_s, memory_bytes
        self.max_bytes = max_payload - ENVELOPE_BYTES
        self.dir = snapshot_dir(store.path)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(mode=0o700, parents=True)
        self.current: Path | None = None
        self.current_seq = -1
        self.readers: Counter[Path] = Counter()
        self.names = itertools.count()
        self.pool = pool
        self.idle: asyncio.Queue[asyncio.Task[asyncio.subprocess.Process]] = asyncio.Queue()   # started or starting
        self.procs: set[asyncio.subprocess.Process] = set()                                   # every worker alive
        for _ in range(pool):
            self.idle.put_nowait(asyncio.create_task(self._start()))

    async def answer(self, request: bytes) -> bytes:
        """Reply {columns, types, rows, truncated}, or {error} saying what to change; never raises."""
        try:
            req = json.loads(request)
            sql, max_rows = req["sql"], max(0, min(int(req.get("max_rows", MAX_ROWS)), MAX_ROWS))
            if not isinstance(sql, str):
                raise TypeError("'sql' must be a string")
            check_read_only(sql)                # refused before a process or a copy is made for it
            path = await self._snapshot()
            try:
                reply = await self._run(path, sql, max_rows)
            finally:
                self._release(path)
            return reply
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:
            text = str(e) if not isinstance(e, KeyError) else "request needs an 'sql' field"
            return json.dumps({"error": text}).encode()

    async def _snapshot(self) -> Path:
        """The copy of the tape at its current position, made now if the tape moved since the last one."""
        async with self.lock:
            if self.current is None or self.current_seq != self.store.last_seq:
                path = self.dir / f"tape-{self.store.last_seq}-{next(self.names)}.duckdb"
                await asyncio.to_thread(self.store.con.execute, "CHECKPOINT")   # every committed row in the file
                await self._copy(path)
                old, self.current, self.current_seq = self.current, path, self.store.last_seq
                if old is not None:
                    self._remove_unread(old)
            self.readers[self.current] += 1
            return self.current

    async def _copy(self, path: Path) -> None:
        """Copied by `cp`, never by this process: closing any descriptor of the tape file here would drop DuckDB's
        lock on it (POSIX record locks are per process), and a second writer could then open the tape. A filesystem that
        clones (btrfs, XFS) makes the copy in constant time; elsewhere it costs a read of the tape (11 MiB per million
        events) under the flush lock, once per tape position."""
        part = path.with_suffix(".part")
        proc = await asyncio.create_subprocess_exec("cp", "--reflink=auto", "--", str(self.store.path), str(part),
                                                    stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise OSError(f"copying the tape for a query failed: {err.decode(errors='replace').strip()}")
        part.rename(path)

    def _release(self, path: Path) -> None:
        self.readers[path] -= 1
        if path != self.current:
            self._remove_unread(path)

    def _remove_unread(self, path: Path) -> None:
        if self.readers[path] <= 0:
            del self.readers[path]
            path.unlink(missing_ok=True)
            shutil.rmtree(path.with_name(path.name + ".tmp"), ignore_errors=True)   # DuckDB's spill, if any

    async def _start(self) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(*sandbox.command(self.memory_bytes), stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                                                    limit=self.max_bytes + (64 << 10))
        self.procs.add(proc)
        return proc

    async def _kept(self, proc: asyncio.subprocess.Process) -> asyncio.subprocess.Process:
        return proc

    async def _replace(self, proc: asyncio.subprocess.Process) -> asyncio.subprocess.Process:
        """Kill a worker (past its deadline, or broken) and start the next one at once."""
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        self.procs.discard(proc)
        return await self._start()

    async def _run(self, path: Path, sql: str, max_rows: int) -> bytes:
        """On a free worker (waiting for one while all POOL answer); the worker goes back to the pool, or its
        replacement does: the pool never shrinks."""
        proc = await (await self.idle.get())
        if proc.returncode is not None:         # it died while it waited
            self.procs.discard(proc)
            proc = await self._start()
        assert proc.stdin is not None and proc.stdout is not None
        line = b""
        try:
            proc.stdin.write(sandbox.request(path, sql, max_rows, self.max_bytes))
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), self.timeout_s)
        except asyncio.TimeoutError:
            self.idle.put_nowait(asyncio.create_task(self._replace(proc)))
            raise sandbox.killed(self.timeout_s) from None
        except (BrokenPipeError, ConnectionResetError, ValueError):   # it died, or its line passed the reply's bound
            pass
        healthy = line.endswith(b"\n")
        self.idle.put_nowait(asyncio.create_task(self._kept(proc) if healthy else self._replace(proc)))
        if not healthy:                                               # it ended without an answer: its memory limit
            await proc.wait()                                         # (killed by its replacement's start if not)
            sandbox.reply(proc.returncode, b"", self.memory_bytes)
        return line[:-1]

    async def close(self) -> None:
        while not self.idle.empty():
            await self.idle.get_nowait()
        for proc in list(self.procs):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
