"""The tape writer's SQL service on `yeto.tape.sql`: each query runs in a sandboxed process of its own over a read-only
copy of the tape, never in the writer's process.

DuckDB lets one process hold a file read-write and no other process read it meanwhile, and its `memory_limit` does not
bound every allocation (`select list(range(300000000))` took the writer past 4 GB, and an interrupt is only a request).
So a query is answered by sandbox.py's process (RLIMIT_AS, killed at the deadline) reading a snapshot: under the
writer's flush lock (no INSERT in flight) the tape is CHECKPOINTed and its file copied by `cp`, once per tape
position (a query on an unchanged tape reuses the copy). The query processes are workers kept once started (one per
lane ahead, more as queries find every one busy), in two lanes (lanes.py): POOL for a user's queries, refused at
once while all POOL run; VIEWS_POOL for the views the CLI itself reads (the request's `lane`), so `yeto status`
answers while a user's queries run to their deadline. The tape's position (the health line's question: sql.position)
the writer answers itself, with no worker and no copy. A reply is encoded row by row and refused the moment it passes
the bus's payload limit.
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
from yeto.infra.tape.lanes import Lane
from yeto.infra.tape.sql import LANES, MAX_ROWS, POSITION, USER, VIEWS, check_read_only, execute

if TYPE_CHECKING:
    from yeto.infra.tape.store import TapeStore

ENVELOPE_BYTES = 1024   # headroom for the reply's subject and headers within max_payload
POOL = 3                # a user's query workers: ~40 MiB RSS each idle (DuckDB loaded), each capped by MEMORY_BYTES
VIEWS_POOL = 2          # the CLI's own views' workers (status, health, dashboard): never taken by `yeto sql`
WAITING = 16            # requests the bus hands over beyond the workers: the views lane's queue, the user's refusals


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
    Made inside the writer's event loop: it starts the query workers at once."""

    def __init__(self, store: TapeStore, lock: asyncio.Lock, *, timeout_s: float, max_payload: int,
                 memory_bytes: int = sandbox.MEMORY_BYTES, pool: int = POOL, views_pool: int = VIEWS_POOL):
        self.store, self.lock, self.timeout_s, self.memory_bytes = store, lock, timeout_s, memory_bytes
        self.max_bytes = max_payload - ENVELOPE_BYTES
        self.dir = snapshot_dir(store.path)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(mode=0o700, parents=True)
        self.current: Path | None = None
        self.current_seq = -1
        self.readers: Counter[Path] = Counter()
        self.names = itertools.count()
        def lane(size: int, refuse_when_full: bool) -> Lane:
            return Lane(size, refuse_when_full=refuse_when_full, timeout_s=timeout_s, memory_bytes=memory_bytes,
                        line_bytes=self.max_bytes + (64 << 10), spill_root=self.dir)
        self.lanes = {USER: lane(pool, True), VIEWS: lane(views_pool, False)}
        self.concurrency = pool + views_pool + WAITING      # what the bus may hand over at once (Bus.serve)

    async def answer(self, request: bytes) -> bytes:
        """Reply {columns, types, rows, truncated}, or {error} saying what to change; never raises."""
        try:
            req = json.loads(request)
            if isinstance(req, dict) and req.get(POSITION) is True:    # the health line's question: no worker, no copy
                return json.dumps({POSITION: self.store.last_seq}).encode()
            sql, max_rows = req["sql"], max(0, min(int(req.get("max_rows", MAX_ROWS)), MAX_ROWS))
            if not isinstance(sql, str):
                raise TypeError("'sql' must be a string")
            if (lane_name := req.get("lane", USER)) not in LANES:
                raise ValueError(f"'lane' must be one of {', '.join(LANES)} (got {lane_name!r})")
            check_read_only(sql)                # refused before a process or a copy is made for it
            lane = self.lanes[lane_name]
            proc = await lane.take()            # a full user lane refuses here, before the tape is copied
            try:
                path = await self._snapshot()
            except BaseException:
                lane.put_back(proc)
                raise
            try:
                return await lane.ask(proc, sandbox.request(path, sql, max_rows, self.max_bytes))
            finally:
                self._release(path)
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

    async def close(self) -> None:
        for lane in self.lanes.values():
            await lane.close()
        shutil.rmtree(self.dir, ignore_errors=True)
