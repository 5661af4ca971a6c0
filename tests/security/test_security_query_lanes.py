"""Queries that stop, and the stack's own liveness (issue 41 items 4 and 6): three of a user's queries running to their
deadline held every later one back that long, `yeto status` included (30.6 s on a live stack, and it warned that the
tape writer "does not answer" while it ran). Now the writer keeps two lanes of query workers (infra/tape/lanes.py): a
user's fourth query is refused at once, saying when the oldest ends, and the CLI's own views (`yeto status`) answer from
workers of their own while the three run; the tape's health line needs no worker (the writer answers its position)."""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from waiting import until_answered
from yeto.cli.main import main
from yeto.cli.tape_query import stale_line
from yeto.infra.bus import connect
from yeto.infra.stack.health import EXITED, tape_health
from yeto.infra.tape.responder import POOL, VIEWS_POOL
from yeto.infra.tape.sql import USER, VIEWS, ask

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
ENDLESS = "select count(*) from range(1000000000000) t, range(10) u"
LONG_S = 150.0   # the writer's deadline here: the three run past everything the test asks, so "answered while they run"
                 # is an order of events (their replies have not come), never a race against a clock


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.parametrize("live_stack", [LONG_S], indirect=True)
def test_three_queries_at_their_deadline_refuse_a_fourth_and_starve_neither_status_nor_the_health_line(
        live_stack, capsys):
    srv, state, writer = live_stack
    cli = ["--state-dir", str(state), "--nats-url", srv.url]

    async def scene() -> None:
        bus = await connect(srv.url, name="operator")
        order: list[str] = []

        async def one(name: str, sql: str, **kw) -> str:
            try:
                reply = f"{(await ask(bus, sql, timeout=LONG_S + 60, **kw))['rows'][0][0]} rows"
            except ValueError as e:
                reply = str(e)
            order.append(name)
            return reply
        try:
            await until_answered(lambda: ask(bus, "select count(*) from events"), 60, "the tape writer answering")
            # Asked in this order on one connection, so the writer receives them so: the three take the user lane.
            slow = [asyncio.create_task(one(f"endless-{k}", ENDLESS)) for k in range(POOL)]
            fourth = asyncio.create_task(one("fourth", "select count(*) from events"))
            view = asyncio.create_task(one("view", "select count(*) from runs", lane=VIEWS))
            refusal, counted = await fourth, await view
            assert f"{POOL} queries are running" in refusal and "the oldest ends in" in refusal, refusal
            assert int(refusal.split("the oldest ends in ")[1].split(" s")[0]) <= LONG_S, refusal
            assert counted.endswith("rows"), counted
            health = await tape_health(srv.url, timeout_s=60)
            assert health.answers and health.line() is None, health
            code = await asyncio.to_thread(main, [*cli, "status"])
            assert order == ["fourth", "view"] and not any(t.done() for t in slow), \
                f"the refusal, the view, the health line and `yeto status` all came while the three ran: {order}"
            assert code == 0
            for t in slow:
                t.cancel()
        finally:
            await bus.close()

    asyncio.run(scene())
    out, err = capsys.readouterr()
    assert "(0 rows)" in out and "no runs on the tape yet" in err and "does not answer" not in err, (out, err)
    assert writer.poll() is None and len(_children(writer.pid)) <= POOL + VIEWS_POOL


@pytest.mark.parametrize("live_stack", [LONG_S], indirect=True)
def test_the_health_line_answers_while_every_query_worker_of_both_lanes_runs_to_its_deadline(live_stack):
    """Five endless joins take every worker, the views lane's two by hand-made requests: the tape's health line (what
    `stack up`, `stack status` and `yeto status` print) still says the writer is current, because the writer answers
    its position itself. Asked of a query worker as before, it waited behind the five and said "does not answer"."""
    srv, state, writer = live_stack

    async def scene() -> None:
        bus = await connect(srv.url, name="operator")
        replies: list[str] = []

        async def endless(lane: str) -> None:
            try:
                await ask(bus, ENDLESS, timeout=LONG_S + 60, lane=lane)
            except ValueError as e:
                replies.append(str(e))
        try:
            await until_answered(lambda: ask(bus, "select count(*) from events"), 60, "the tape writer answering")
            slow = [asyncio.create_task(endless(USER)) for _ in range(POOL)]
            slow += [asyncio.create_task(endless(VIEWS)) for _ in range(VIEWS_POOL)]
            refusal = await asyncio.create_task(one_refused(bus))
            assert f"{POOL} queries are running" in refusal, refusal
            health = await tape_health(srv.url, timeout_s=60)
            args = argparse.Namespace(state_dir=str(state), nats_url=srv.url)
            line = await asyncio.to_thread(stale_line, args)
            assert not replies and not any(t.done() for t in slow), f"all five still ran: {replies}"
            assert health.answers and health.line() is None and health.tape_seq == health.stream_seq, health
            assert line is None, line
            for t in slow:
                t.cancel()
        finally:
            await bus.close()

    asyncio.run(scene())
    assert writer.poll() is None


async def one_refused(bus) -> str:
    """A user's query asked after the others on the same connection: refused while the user lane is full."""
    try:
        return f"answered: {await ask(bus, 'select count(*) from events', timeout=LONG_S + 60)}"
    except ValueError as e:
        return str(e)


def test_stack_up_tells_at_once_that_a_tape_writer_which_died_at_its_start_exited(tmp_path, capsys):
    """A tape file DuckDB cannot open kills the writer at its start: `stack up` exits 1 naming the dead component and its
    log, and the tape's line says its process exited. It used to wait out its 20 s for an answer that could not come and
    then say only that nothing answers on the tape's subject."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "tape.duckdb").write_bytes(b"not a DuckDB file " * 4096)
    try:
        assert main(["stack", "up", "--state-dir", str(state)]) == 1
        err = capsys.readouterr().err
        assert "tape         DOWN: it exited" in err and f"does not answer ({EXITED})" in err, err
    finally:
        main(["stack", "down", "--state-dir", str(state)])
