"""The tape writer's query workers in two lanes: a user's queries (`yeto sql`), and the views the CLI itself reads.

A lane is a pool of up to `size` query processes (sandbox.py's command) kept once started: one is started ahead, the
next ones as queries find every started one busy (each idle worker holds ~40 MiB with DuckDB loaded, and a stack that
is only asked one query at a time, as most are, needs one per lane: `size` started ahead cost every stack five DuckDB
loads, ~0.27 CPU s each, 2026-12-06). Each answers one query after another; past its deadline it is killed and its
replacement started at once, so a lane never shrinks. The user lane
refuses a query the moment all its workers are busy, saying when the oldest ends; it never queues one, or three
queries running to their deadline would hold every later one that long. The views lane (`yeto status`, the
dashboard, `tape show`, `logs`: sql.VIEWS in the request) has workers of its own and queues, so no number of slow user
queries delays what the operator is shown. A lane that is closed (the writer stops) kills every worker, those answering
included, and starts none: a replacement started during the stop kept the writer from exiting.
"""
from __future__ import annotations

import asyncio
import itertools
import math
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from yeto.infra.tape import sandbox

Process = asyncio.subprocess.Process


class LaneFull(ValueError):
    """Every worker of a lane that refuses when full is answering a query."""


class Lane:
    """Up to `size` workers; `refuse_when_full`: the user lane's rule (else a query waits for a free worker)."""

    def __init__(self, size: int, *, refuse_when_full: bool, timeout_s: float, memory_bytes: int, line_bytes: int,
                 spill_root: Path):
        self.size, self.refuse_when_full, self.timeout_s = size, refuse_when_full, timeout_s
        self.memory_bytes, self.line_bytes, self.spill_root = memory_bytes, line_bytes, spill_root
        self.spills: dict[int, Path] = {}                                   # id(worker) -> its own spill folder
        self.names = itertools.count()
        self.idle: asyncio.Queue[asyncio.Task[Process]] = asyncio.Queue()   # started or starting
        self.procs: set[Process] = set()                                    # every worker alive
        self.taken: dict[int, float] = {}                                   # id(worker) -> when it was taken
        self.closed = False                                                 # then no worker is started or kept
        self.started = 0                                                    # workers started (or starting), <= size
        self._grow()                                                        # one ahead

    def _grow(self) -> None:
        self.started += 1
        self.idle.put_nowait(asyncio.create_task(self._start()))

    async def take(self) -> Process:
        """A free worker, held until `ask` or `put_back` returns it; LaneFull at once when none is free and the lane
        refuses (taken before the tape is copied for the query, so a refusal costs nothing)."""
        if self.closed:
            raise ValueError("the tape writer is stopping: ask again once `yeto stack up` has started it")
        if self.idle.empty():
            if self.started < self.size:        # every started worker is busy: one more, up to the lane's size
                self._grow()
            elif self.refuse_when_full:
                raise self.full()
        proc = await (await self.idle.get())
        if proc.returncode is not None:         # it died while it waited
            self._gone(proc)
            proc = await self._start()
        self.taken[id(proc)] = asyncio.get_running_loop().time()
        return proc

    def full(self) -> LaneFull:
        now = asyncio.get_running_loop().time()
        ends_s = max(0, math.ceil(min(self.taken.values(), default=now) + self.timeout_s - now))
        return LaneFull(f"{self.size} queries are running, the most the tape answers at once for `yeto sql`; the "
                        f"oldest ends in {ends_s} s at the latest (its {self.timeout_s:.0f} s deadline): ask again "
                        "then, or narrow the slow ones. `yeto status` and the other views answer meanwhile")

    def put_back(self, proc: Process) -> None:
        self._give_back(proc, self._kept)

    def _give_back(self, proc: Process, then: Callable[[Process], Awaitable[Process]]) -> None:
        """Out of the taken ones; into the lane as `then(proc)` makes it (itself, or its replacement), or killed."""
        self.taken.pop(id(proc), None)
        if self.closed:
            _kill(proc)
        else:
            self.idle.put_nowait(asyncio.create_task(then(proc)))

    async def ask(self, proc: Process, request: bytes) -> bytes:
        """The reply line of a taken worker, which goes back to the lane (or its replacement does); ValueError when it
        ran past its deadline (killed) or died without an answer (its memory limit)."""
        assert proc.stdin is not None and proc.stdout is not None
        line = b""
        try:
            proc.stdin.write(request)
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), self.timeout_s)
        except asyncio.TimeoutError:
            self._replace_later(proc)
            raise sandbox.killed(self.timeout_s) from None
        except (BrokenPipeError, ConnectionResetError, ValueError):   # it died, or its line passed the reply's bound
            pass
        if line.endswith(b"\n"):
            self.put_back(proc)
            return line[:-1]
        self._replace_later(proc)                                     # it ended without an answer: its memory limit
        await proc.wait()                                             # (killed by its replacement's start if not)
        return sandbox.reply(proc.returncode, b"", self.memory_bytes)  # raises: no line came

    def _replace_later(self, proc: Process) -> None:
        self._give_back(proc, self._replace)

    async def _start(self) -> Process:
        spill = self.spill_root / f"{sandbox.SPILL_PREFIX}{id(self)}-{next(self.names)}"
        spill.mkdir(parents=True, mode=0o700)
        proc = await asyncio.create_subprocess_exec(*sandbox.command(self.memory_bytes, spill),
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL, limit=self.line_bytes)
        self.procs.add(proc)
        self.spills[id(proc)] = spill
        return proc

    def _gone(self, proc: Process) -> None:
        """A worker that ended: what DuckDB spilled for its last query goes with it (a killed query leaves its files)."""
        self.procs.discard(proc)
        if (spill := self.spills.pop(id(proc), None)) is not None:
            shutil.rmtree(spill, ignore_errors=True)

    async def _kept(self, proc: Process) -> Process:
        return proc

    async def _replace(self, proc: Process) -> Process:
        """Kill a worker (past its deadline, or broken) and start the next one at once."""
        _kill(proc)
        await proc.wait()
        self._gone(proc)
        return await self._start()

    async def close(self) -> None:
        """Kill every worker, those answering included (their queries are told the writer stops), and start none."""
        self.closed = True
        for proc in list(self.procs):
            _kill(proc)
        while not self.idle.empty():
            _kill(await self.idle.get_nowait())         # a replacement that was starting
        for proc in list(self.procs):
            await proc.wait()
            self._gone(proc)


def _kill(proc: Process) -> None:
    if proc.returncode is None:
        proc.kill()
