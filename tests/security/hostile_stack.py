"""A live stack's pieces for the hostile-learner tests (issue 41): learner credentials of two runs on a real nats-server
with the stack's permissions, a real tape writer process, and a learner's raw publishes."""
from __future__ import annotations

import json

import nats

from waiting import until_answered
from yeto.infra.bus import auth as bus_auth
from yeto.infra.tape.sql import ask
from yeto.schemas.training import LearnerProgress

QUERY_TIMEOUT_S = 15.0     # the tape writer's query deadline in these tests: a cold query process on a loaded machine
VICTIM, ATTACKER, GHOST = "r-victim", "r-attack", "r-ghost"
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": "", "spot": False, "price_per_hour": 1.0}


def progress(run_id: str, learner: str, step: int, **kw) -> LearnerProgress:
    fields = {"loss": 2.5, "tokens": 100 * step, "tokens_per_s": 10.0, "step_time_s": 0.1, "lr": 1e-3, **kw}
    return LearnerProgress(run_id=run_id, learner=learner, step=step, **fields)


async def as_learner(url: str, state, run_id: str, learner: str, sends: list[tuple[str, bytes]]) -> None:
    """Publish with a plain learner credential (core NATS: the stream takes what the server lets through)."""
    ident = json.loads(bus_auth.learner_file(state, run_id, learner).read_text())
    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))
    nc = await nats.connect(url, user=ident["user"], password=ident["password"], inbox_prefix=ident["inbox_prefix"],
                            error_cb=on_error, allow_reconnect=False)
    try:
        for subject, data in sends:
            await nc.publish(subject, data)
        await nc.flush()
    finally:
        await nc.close()
    assert not errors, f"its own subject is allowed: {errors}"


async def rows_when(bus, sql: str, want: int) -> list:
    """Ask the tape writer until `sql` has `want` rows (a ValueError while the writer is starting counts as not yet)."""
    async def enough() -> list:
        rows = (await ask(bus, sql, timeout=30))["rows"]
        return rows if len(rows) >= want else []
    return await until_answered(enough, 60, f"{want} rows of {sql} on the tape")
