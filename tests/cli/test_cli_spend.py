"""Spend is one number: a run whose head costs $/hr shows the same spend, the head's part included, in `yeto status`
(the table and the run's detail), `yeto sql` over the spend view, `yeto tape replay` and the finalizer's budget
cutoff; on the laptop's tape and on a cloud run's tape copied back from its head."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from yeto.cli.main import main
from yeto.infra.head import records as heads
from yeto.infra.stack import StackPaths
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes
from yeto.schemas.final import RunFinalized
from yeto.schemas.fleet import IslandPreempted, IslandRequested, IslandUp, RunLaunched
from yeto.schemas.run_view import evolve, head_usd, spend_usd
from yeto.services.finalizer.budget import cut_reason

pytestmark = pytest.mark.timeout(120)
T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)
RUN = "r-spend"
SPEC = {"cloud": "aws", "gpu": "A100", "count": 1, "nodes": 1, "region": None, "spot": True}
# head $1.20/hr for the run's hour; island 0 at $3/hr from minute 1 to the end, island 1 at $2/hr from 2 to 20
HEAD, TOTAL = 1.2, 1.2 + 3.0 * 59 / 60 + 2.0 * 18 / 60


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def events(max_spend: float) -> list:
    def up(i: int, price: float, t: float):
        return IslandUp(id=f"up-{i}", run_id=RUN, island=i, generation=0, spec=SPEC, price_per_hour=price, ts=at(t))
    return [RunLaunched(id="launched", run_id=RUN, fleet=[SPEC, SPEC], ts=at(0),
                        recipe={"head_price_per_hour": HEAD, "limits": {"max_spend": max_spend}}),
            up(0, 3.0, 1), up(1, 2.0, 2),
            IslandPreempted(id="pre-1", run_id=RUN, island=1, generation=0, spec=SPEC, price_per_hour=2.0,
                            reason="spot", ts=at(20)),
            RunFinalized(id="final", run_id=RUN, output="/o", manifest_sha256="1", reason="user", spend_usd=TOTAL,
                         ts=at(60))]


def write_tape(path, evs) -> None:
    store = TapeStore(path)
    store.append(list(range(1, len(evs) + 1)), [e.run_id for e in evs], [to_bytes(e).decode() for e in evs])
    store.close()


@pytest.fixture(params=["laptop", "copied-from-head"])
def state(request, tmp_path):
    """The run's tape where `yeto` reads it: the local stack's tape file, or a cloud run's copy under heads/<run>/."""
    if request.param == "laptop":
        write_tape(StackPaths(tmp_path).db, events(max_spend=TOTAL))
    else:
        heads.write_head(tmp_path, heads.new_record(tmp_path, RUN, price_per_hour=HEAD, launched_at=1.0) | {"state": "copied"})
        write_tape(heads.copied_tape(tmp_path, RUN), events(max_spend=TOTAL))
    return tmp_path


def yeto(capsys, state, *argv: str) -> str:
    assert main(["--state-dir", str(state), *argv]) == 0
    return capsys.readouterr().out


def test_the_head_is_in_the_same_spend_everywhere(capsys, state):
    table = yeto(capsys, state, "status").splitlines()
    assert table[0].split()[-2:] == ["spend_usd", "events"]
    row = next(ln.split() for ln in table if ln.startswith(RUN))      # step and loss are blank: read from the right
    assert float(row[-2]) == pytest.approx(TOTAL, abs=1e-4)

    detail = yeto(capsys, state, "status", RUN)
    assert re.search(r"spend so far \$([\d.]+) \(head \$([\d.]+)\)", detail).groups() == (f"{TOTAL:.4f}", f"{HEAD:.4f}")

    sql = json.loads(yeto(capsys, state, "sql", f"select usd, head_usd from spend where run_id = '{RUN}'",
                          "--format", "json", "--run", RUN))
    assert sql == [{"usd": pytest.approx(TOTAL, rel=1e-9), "head_usd": pytest.approx(HEAD, rel=1e-9)}]

    replay = yeto(capsys, state, "tape", "replay", RUN)
    assert f"spend so far ${TOTAL:.4f} (head ${HEAD:.4f})" in replay


def test_the_budget_cutoff_counts_the_head_as_status_shows_it():
    """The finalizer folds the same events: at the hour the budget rule sees the total status prints, head included."""
    live = reduce(evolve, events(max_spend=TOTAL)[:-1], {})[RUN]
    assert spend_usd(live, at(60)) == pytest.approx(TOTAL) and head_usd(live, at(60)) == pytest.approx(HEAD)
    assert cut_reason(live, now=at(60), period_s=0)[0] == "budget"
    assert cut_reason(live, now=at(59.9), period_s=0) is None     # a moment before, it is under the cap
    assert spend_usd(live, at(60)) - head_usd(live, at(60)) < TOTAL - 1   # the islands alone never reach it
    over = reduce(evolve, events(max_spend=TOTAL + 0.01)[:-1], {})[RUN]
    assert cut_reason(over, now=at(60), period_s=0) is None


def test_an_island_moved_to_another_offer_shows_that_offers_price_before_it_is_up(capsys, tmp_path):
    """A refused island's next generation asked on another offer (the planner's move): status's $/hour is the new
    offer's from the request on, and nothing is billed until it is up."""
    moved = {**SPEC, "region": "us-west-2", "price_per_hour": 5.0}
    def requested(generation: int, spec: dict, price: float, t: float):
        return IslandRequested(id=f"req-{generation}", run_id=RUN, island=0, generation=generation, spec=spec,
                               price_per_hour=price, ts=at(t))
    evs = [RunLaunched(id="launched", run_id=RUN, fleet=[{**SPEC, "price_per_hour": 3.0}], ts=at(0),
                       recipe={"head_price_per_hour": HEAD}),
           requested(0, {**SPEC, "price_per_hour": 3.0}, 3.0, 0.1), requested(1, moved, 5.0, 1)]
    view = reduce(evolve, evs, {})[RUN]
    (island,) = view.islands
    assert (island.generation, island.phase, island.price_per_hour) == (1, "replacing", 5.0)
    assert island.meter.usd_at(at(30)) == 0.0
    write_tape(StackPaths(tmp_path).db, evs)
    rows = [ln.split() for ln in yeto(capsys, tmp_path, "status", RUN).splitlines()]
    header = next(i for i, r in enumerate(rows) if r[:2] == ["island", "phase"])
    assert rows[header + 2][:4] == ["0", "replacing", "1", "5"], rows     # under the rule line
    up = IslandUp(id="up-1", run_id=RUN, island=0, generation=1, spec=moved, price_per_hour=5.0, ts=at(2))
    billed = reduce(evolve, [*evs, up], {})[RUN].islands[0]
    assert billed.meter.usd_at(at(62)) == pytest.approx(5.0)
