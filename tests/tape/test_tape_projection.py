"""The shared run fold (schemas/run_view.py): exact states after scripted events, the same from models and from
tape dicts, the same for the launcher, the finalizer and the CLI, and the head's price in spend."""
from __future__ import annotations

import json
from dataclasses import replace
from functools import reduce

import pytest

from tape_events import SCRIPTED_SPEND, at, scripted_run
from yeto.cli.tape import as_event
from yeto.schemas.events import ServiceStarted
from yeto.schemas.run_view import Learner, RunView, evolve, fold, spend_usd
from yeto.services.finalizer.state import evolve as finalizer_evolve
from yeto.services.launcher.state import evolve as launcher_evolve


def fold_all(events) -> RunView:
    view = None
    for seq, ev in enumerate(events, 1):
        view = fold(view, ev, seq)
    return view


def test_scripted_run_folds_to_the_exact_final_view():
    v = fold_all(scripted_run())
    assert (v.run_id, v.phase, v.reason, v.ended, v.launched_at, v.ended_at) == (
        "r-demo", "finalized", "max_steps", "RunFinalized", at(0), at(60))
    assert (v.num_events, v.last_seq, v.last_ts, v.rounds_merged, v.versions) == (15, 15, at(60), 3, {0: 2, 1: 1})
    assert [(i.phase, i.generation, i.last_step, i.price_per_hour) for i in v.islands] == [("up", 0, 10, 2.0), ("up", 1, 20, 3.0)]
    assert [(i.meter.up_since, i.meter.closed_hours, i.meter.closed_usd) for i in v.islands] == [
        (None, 1.0, 2.0), (None, pytest.approx(50 / 60), pytest.approx(2.5))]      # the run's end closed both meters
    assert v.learners == {"island-0": Learner(step=10, loss=2.5, tokens={0: 1000}, step_time_s=1.0),
                          "island-1": Learner(step=20, loss=1.8, tokens={0: 2000, 1: 500}, step_time_s=1.0)}
    assert v.num_tokens == 3500 and spend_usd(v, at(600)) == pytest.approx(SCRIPTED_SPEND)


def test_phases_follow_the_run_lifecycle():
    views = [fold_all(scripted_run()[:n]) for n in range(1, 16)]
    assert [v.phase for v in views][:4] == ["launching", "launching", "launching", "running"]
    assert [v.phase for v in views][-2:] == ["finalizing", "finalized"]
    assert views[8].islands[1].phase == "preempted" and views[10].islands[1].phase == "up"


def test_open_island_spend_accrues_until_now_and_stops_at_the_run_end():
    events = scripted_run()
    live = fold_all(events[:5])                               # both islands up since minute 0, nothing closed yet
    assert spend_usd(live, at(0)) == 0.0
    assert spend_usd(live, at(30)) == pytest.approx(2.5)      # 30 min × ($2 + $3)/h
    assert spend_usd(fold_all(events), at(600)) == pytest.approx(SCRIPTED_SPEND)


def test_the_heads_price_runs_from_launch_to_the_runs_end():
    events = scripted_run()
    events[0] = events[0].model_copy(update={"recipe": {**events[0].recipe, "head_price_per_hour": 0.6}})
    assert spend_usd(fold_all(events[:5]), at(30)) == pytest.approx(2.5 + 0.3)
    assert spend_usd(fold_all(events), at(600)) == pytest.approx(SCRIPTED_SPEND + 0.6)


def test_an_older_generations_news_neither_changes_the_phase_nor_stops_the_meter():
    events = scripted_run()[:11]                              # island 1 replaced (generation 1) at minute 40
    late = events[8].model_copy(update={"id": "late", "ts": at(50)})     # generation 0's preemption, delivered late
    v = fold_all(events + [late])
    assert v.islands[1].phase == "up" and v.islands[1].meter.up_since == at(40)
    assert spend_usd(v, at(60)) == pytest.approx(2.0 + 1.5 + 1.0)


def test_a_tape_dict_folds_like_its_model_and_unknown_types_only_count():
    models = scripted_run()
    dicts = [json.loads(m.model_dump_json()) for m in models]
    unknown = {"type": "SomethingNew", "version": 7, "run_id": "r-demo", "ts": at(59).isoformat()}
    from_dicts = fold_all([as_event(d) for d in dicts[:-1] + [unknown] + dicts[-1:]])
    assert replace(from_dicts, num_events=15, last_seq=15) == fold_all(models)
    assert as_event(dicts[0]) == models[0] and as_event(unknown) == unknown


def test_the_launcher_the_finalizer_and_the_cli_fold_the_same_view():
    events = scripted_run() + scripted_run("r-other")[:6]
    runs = reduce(evolve, events, {})
    assert reduce(launcher_evolve, events, {}) == runs
    assert {k: r.view for k, r in reduce(finalizer_evolve, events, {}).items()} == runs
    assert replace(runs["r-demo"], last_seq=15) == fold_all(scripted_run())


def test_events_of_a_run_not_launched_and_of_no_run_change_nothing():
    first, *rest = scripted_run()
    assert reduce(evolve, rest, {}) == {}
    runs = reduce(evolve, [first], {})
    assert evolve(runs, ServiceStarted(service="launcher", instance="l-1", pid=1, host="h")) == runs
