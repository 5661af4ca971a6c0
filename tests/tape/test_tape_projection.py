"""RunView is a pure fold: exact states after scripted events, the same from models and from tape dicts."""
from __future__ import annotations

import json

import pytest

from tape_events import SCRIPTED_SPEND, at, scripted_run
from yeto.projections import IslandView, RunView, as_event, fold, replay, spend_at


def fold_all(events) -> RunView:
    view = None
    for seq, ev in enumerate(events, 1):
        view = fold(view, ev, seq)
    return view


def test_scripted_run_folds_to_the_exact_final_view():
    v = fold_all(scripted_run())
    assert v == RunView(
        run_id="r-demo", phase="finalized", reason="max_steps", started=at(0), finished=at(60), last_ts=at(60),
        last_seq=15, num_events=15, max_steps=100,
        islands={"0": IslandView(island="0", status="stopped", price_per_hour=2.0, closed_usd=2.0, uptime_s=3600.0),
                 "1": IslandView(island="1", status="stopped", price_per_hour=3.0, closed_usd=2.5, uptime_s=3000.0)},
        rounds_merged=3, versions={"0": 2, "1": 1}, losses={"island-0": 2.5, "island-1": 1.8},
        steps={"island-0": 10, "island-1": 5}, tokens={"island-0": 1000, "island-1": 500},
        generations={"island-0": 0, "island-1": 1}, retired_tokens=2000)
    assert v.spend_usd == pytest.approx(SCRIPTED_SPEND)
    assert v.num_tokens == 3500


def test_phases_follow_the_run_lifecycle():
    phases = [view.phase for _, view in replay(enumerate(scripted_run(), 1))]
    assert phases[:4] == ["launching", "launching", "launching", "running"]
    assert phases[-2:] == ["finalizing", "finalized"]


def test_open_island_spend_accrues_until_now_and_stops_at_the_run_end():
    events = scripted_run()
    live = fold_all(events[:5])                       # both islands up since minute 0, nothing closed yet
    assert live.spend_usd == 0.0
    assert spend_at(live, at(30)) == pytest.approx(2.5)   # 30 min × ($2 + $3)/h
    done = fold_all(events)
    assert spend_at(done, at(600)) == pytest.approx(SCRIPTED_SPEND)


def test_a_tape_dict_folds_like_its_model_and_unknown_types_are_ignored():
    models = scripted_run()
    dicts = [json.loads(m.model_dump_json()) for m in models]
    unknown = {"type": "SomethingNew", "version": 7, "run_id": "r-demo", "ts": at(59).isoformat()}
    from_dicts = fold_all(dicts[:-1] + [unknown] + dicts[-1:])
    assert replace_counts(from_dicts) == replace_counts(fold_all(models))
    assert as_event(dicts[0]) == models[0]
    assert as_event(unknown) == unknown


def replace_counts(v: RunView) -> RunView:
    from dataclasses import replace
    return replace(v, num_events=0, last_seq=0)


def test_replay_returns_the_state_after_every_event_without_mutating_earlier_ones():
    timeline = replay(enumerate(scripted_run(), 1))
    assert [seq for seq, _ in timeline] == list(range(1, 16))
    assert timeline[6][1].rounds_merged == 1 and timeline[-1][1].rounds_merged == 3
    assert timeline[4][1].islands["1"].status == "up" and timeline[8][1].islands["1"].status == "preempted"
