"""The SQL views agree with the shared run fold on one real DuckDB tape: phase, end, rounds, island hours and
spend (the head's price included), for scripted runs and for generated island histories."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape_events import scripted_run
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes
from yeto.schemas.final import FinalCutRequested, RunFailed, RunFinalized, RunStopped
from yeto.schemas.fleet import (
    IslandDropped,
    IslandExited,
    IslandPreempted,
    IslandReplaced,
    IslandRequested,
    IslandStopped,
    IslandUp,
    RunLaunched,
)
from yeto.schemas.run_view import RunView, evolve, spend_usd
from yeto.schemas.run_view import head_usd as run_head_usd

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
SPEC = {"cloud": "aws", "gpu": "a100", "count": 1, "nodes": 1, "region": None, "spot": True}
ISLAND = {"IslandUp": IslandUp, "IslandExited": IslandExited, "IslandPreempted": IslandPreempted,
          "IslandDropped": IslandDropped, "IslandStopped": IslandStopped, "IslandRequested": IslandRequested}


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def island(type_: str, run: str, i: int, gen: int, t: float, price: float, n: int):
    if type_ == "IslandUp" and gen > 0:
        return IslandReplaced(id=f"{run}-{n}", run_id=run, island=i, generation=gen, spec=SPEC, price_per_hour=price,
                              previous_generation=gen - 1, ts=at(t))
    extra = {"reason": "x"} if type_ in ("IslandPreempted", "IslandDropped") else {}
    return ISLAND[type_](id=f"{run}-{n}", run_id=run, island=i, generation=gen, spec=SPEC, price_per_hour=price,
                         ts=at(t), **extra)


def launched(run: str, num_islands: int, head: float) -> RunLaunched:
    return RunLaunched(id=f"{run}-launched", run_id=run, fleet=[SPEC] * num_islands, ts=at(0),
                       recipe={"train": {"max_steps": 10}, "head_price_per_hour": head})


def compare(store: TapeStore, events) -> dict[str, RunView]:
    """Append the events to the tape, fold them, and check each of their runs' view rows against its view."""
    seqs = list(range(store.last_seq + 1, store.last_seq + 1 + len(events)))
    store.append(seqs, [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    views = reduce(evolve, events, {})
    only = "WHERE run_id IN (" + ", ".join(f"'{r}'" for r in views) + ")"
    q = lambda sql: store.con.execute(sql).fetchall()  # noqa: E731
    store.con.execute("BEGIN TRANSACTION")      # one now() for every query: open intervals are priced up to it
    runs = {r[0]: r[1:] for r in q(f"SELECT run_id, phase, finished, num_rounds, num_events FROM runs {only}")}
    spend = {r[0]: r[1:] for r in q(f"SELECT run_id, now(), usd, head_usd, island_hours, num_open FROM spend {only}")}
    hours = dict(((r, int(i)), h) for r, i, h in q(f"SELECT run_id, island, sum(hours) FROM island_uptime {only} GROUP BY 1, 2"))
    store.con.execute("ROLLBACK")
    assert set(runs) == set(spend) == set(views)
    for run_id, v in views.items():
        assert runs[run_id] == (v.phase, v.ended_at, v.rounds_merged, v.num_events)
        now, usd, head_usd, island_hours, num_open = spend[run_id]
        until = v.ended_at or now
        assert usd == pytest.approx(spend_usd(v, now), rel=1e-9, abs=1e-9)
        assert head_usd == pytest.approx(v.head_price_per_hour * (until - v.launched_at).total_seconds() / 3600, rel=1e-9)
        assert head_usd == pytest.approx(run_head_usd(v, now), rel=1e-9, abs=1e-12)
        assert island_hours == pytest.approx(sum(isl.meter.hours_at(until) for isl in v.islands), rel=1e-9, abs=1e-9)
        assert num_open == sum(isl.meter.up_since is not None for isl in v.islands)
        for isl in v.islands:
            assert hours.get((run_id, isl.index), 0.0) == pytest.approx(isl.meter.hours_at(until), rel=1e-9, abs=1e-9)
    return views


@pytest.fixture(scope="module")
def tape():
    store = TapeStore(":memory:")               # the real DuckDB and views; the file itself is tested in test_tape_store
    yield store
    store.close()


def test_scripted_runs_ended_live_stopped_and_launching_agree_with_the_fold(tape):
    r = "r-ended"
    ended = [launched(r, 3, head=0.5), *(island("IslandUp", r, i, 0, i, 2.0 + i, 10 + i) for i in range(3)),
             island("IslandExited", r, 1, 0, 20, 3.0, 20), island("IslandPreempted", r, 1, 0, 20, 3.0, 21),
             island("IslandRequested", r, 1, 1, 21, 3.0, 22), island("IslandUp", r, 1, 1, 30, 3.5, 23),
             island("IslandStopped", r, 1, 0, 35, 3.0, 24), island("IslandUp", r, 1, 0, 36, 3.0, 25),  # generation 0's
                                                                                                    # late news: no change
             island("IslandPreempted", r, 2, 0, 10, 4.0, 30), island("IslandRequested", r, 2, 1, 11, 4.0, 31),
             island("IslandDropped", r, 2, 1, 40, 4.0, 32),
             FinalCutRequested(id=f"{r}-cut", run_id=r, reason="max_steps", ts=at(50)),
             RunFinalized(id=f"{r}-final", run_id=r, output="/o", manifest_sha256="1", reason="max_steps", spend_usd=0,
                          ts=at(60)),
             island("IslandStopped", r, 0, 0, 61, 2.0, 40), island("IslandStopped", r, 1, 1, 61, 3.5, 41)]
    live = [launched("r-live", 2, head=1.0), island("IslandUp", "r-live", 0, 0, 1, 2.0, 1),
            island("IslandUp", "r-live", 1, 0, 2, 3.0, 2), IslandExited(id="r-live-x", run_id="r-live", island=1, spec=SPEC,
                                                                        exit_code=0, ts=at(30))]
    stopped = [launched("r-stopped", 1, head=0.2), island("IslandUp", "r-stopped", 0, 0, 0, 1.0, 1),
               RunStopped(id="r-stopped-end", run_id="r-stopped", reason="yeto down --now", ts=at(10)),
               RunFailed(id="r-stopped-fail", run_id="r-stopped", reason="later", ts=at(11))]   # the first end wins
    views = compare(tape, ended + live + stopped + [launched("r-launching", 1, head=0.0)] + scripted_run())
    assert [views[k].phase for k in ("r-ended", "r-live", "r-stopped", "r-launching", "r-demo")] == [
        "finalized", "running", "stopped", "launching", "finalized"]
    assert spend_usd(views["r-ended"], at(999)) == pytest.approx(0.5 + 2 + 3 * 19 / 60 + 3.5 * 30 / 60 + 4 * 8 / 60)


MOVES = st.tuples(st.sampled_from(sorted(ISLAND)), st.integers(0, 1), st.integers(0, 2), st.integers(0, 5),
                  st.sampled_from([0.0, 1.5, 4.0]))


@settings(max_examples=40, deadline=None)
@given(moves=st.lists(MOVES, max_size=14), head=st.sampled_from([0.0, 0.7]),
       end=st.sampled_from([None, "RunFinalized", "RunFailed", "RunStopped"]))
def test_any_island_history_bills_the_same_in_sql_and_in_the_fold(tape, moves, head, end):
    """Islands up, down and back in any order, with late news of older generations, before and after the end."""
    r, t = f"r-gen-{tape.last_seq}", 0.0      # a run of its own per example, on the one tape
    events = [launched(r, 2, head)]
    for n, (type_, i, gen, dt, price) in enumerate(moves):
        t += dt
        events.append(island(type_, r, i, gen, t, price, n))
        if end and n == len(moves) // 2:
            fields = {"output": "/o", "manifest_sha256": "1", "spend_usd": 0, "reason": "user"} if end == "RunFinalized" \
                else {"reason": "user"}
            events.append({"RunFinalized": RunFinalized, "RunFailed": RunFailed, "RunStopped": RunStopped}[end](
                id=f"{r}-end", run_id=r, ts=at(t), **fields))
    compare(tape, events)
