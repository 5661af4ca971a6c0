"""The read-side commands' one way to the tape: asked of the running tape writer over NATS, else the file read-only."""
from __future__ import annotations

import asyncio
from typing import Any

from yeto.cli.common import run_source
from yeto.infra.bus import connect
from yeto.infra.settings import load
from yeto.infra.stack import StackPaths, stack_url

MAX_ROWS = 100_000   # infra.tape_sql's; that module imports DuckDB, which only a command that queries should pay for
PATIENT_CONNECT_S = 30.0   # the second try, when the tape file shows that a writer runs
ASK_S = 35.0               # past the writer's 30 s query deadline: a query it killed is told as killed, not lost


class TapeUnreachable(ConnectionError):
    """A remote stack's bus cannot be reached and there is no local file to read instead: a reader must say so, never
    "no such run" (a bus without a tape writer is another matter: the run may be on the stream yet)."""


def tape_query(args, sql: str, *, max_rows: int = MAX_ROWS, run: str | None = None, views: bool = True) -> dict[str, Any]:
    """{columns, rows, ...}: from the running stack's tape writer, else from the tape file read-only. With `run`,
    from where that run's tape is (its head VM, or the tape copied back from it: common.run_source). `views`: the
    CLI's own read (the writer's views lane, infra/tape/lanes.py); False for a user's statement (`yeto sql`)."""
    from yeto.infra.tape.sql import NoTapeWriterError, query_file
    from yeto.infra.tape.store import TapeHeldError
    settings = load(state_dir=getattr(args, "state_dir", None), nats_url=getattr(args, "nats_url", None))
    if run:
        url, db, only = run_source(args, run)
    else:
        url, db = settings.nats_url or stack_url(settings.state_dir), StackPaths(settings.state_dir).db
        only = "check --nats-url / $YETO_NATS_URL" if settings.nats_url else None
    if url:
        try:
            return asyncio.run(_ask(url, sql, max_rows, views))
        except (ConnectionError, NoTapeWriterError) as e:
            if only:  # a remote stack: there is no local file to fall back on (its bus unreachable: say so)
                raise (TapeUnreachable if isinstance(e, ConnectionError) else ValueError)(f"{e}; {only}") from None
    if not db.exists():
        raise ValueError(no_tape(db))
    try:
        return query_file(db, sql, max_rows=max_rows)
    except TapeHeldError:
        if not url:
            raise
        # A tape writer holds the file, so it runs: the bus was only slow to answer (a loaded machine). Ask again,
        # patiently, rather than fail with "is the stack up?" while it is.
        return asyncio.run(_ask(url, sql, max_rows, views, connect_timeout=PATIENT_CONNECT_S))


def no_tape(db) -> str:
    """Why there is no tape file, and what to do: a stack's tape writer creates it when the stack starts."""
    log = StackPaths(db.parent).logs / "tape.log"
    if log.exists():
        return f"no tape at {db}: a stack ran under {db.parent}, but its tape writer never created the tape ({log} says why)"
    return (f"no tape at {db}: no local stack has run under {db.parent}. `yeto launch ... --gpu local:1xcpu,local:1xcpu` "
            f"starts one, and its tape; a cloud run's tape: --run RUN; runs kept elsewhere: --state-dir")


def stale_line(args) -> str | None:
    """What a reader of the running stack's tape must be told (its writer down, or far behind), else None: the data
    `yeto status` shows comes from the tape file as the writer left it (infra/stack/health.py)."""
    from yeto.infra.stack.health import tape_health
    settings = load(state_dir=getattr(args, "state_dir", None), nats_url=getattr(args, "nats_url", None))
    url = settings.nats_url or stack_url(settings.state_dir)
    return asyncio.run(tape_health(url)).line() if url else None


async def _ask(url: str, sql: str, max_rows: int, views: bool, connect_timeout: float = 2.0) -> dict[str, Any]:
    from yeto.infra.tape.sql import USER, VIEWS, ask
    try:
        bus = await connect(url, name="yeto-cli", connect_timeout=connect_timeout)
    except Exception as e:  # noqa: BLE001 - any failure to connect means: read the file instead
        raise ConnectionError(str(e)) from None
    try:
        return await ask(bus, sql, max_rows=max_rows, timeout=ASK_S, lane=VIEWS if views else USER)
    finally:
        await bus.close()
