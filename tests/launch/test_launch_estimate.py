"""The one estimator (services/planner/estimate.py): the plan's time and cost before a run, the measured pace after its
first steps, and the same ETA in `yeto status RUN` and the terminal's live view."""
from __future__ import annotations

import io
import re
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from rich.console import Console

from yeto.cli.describe import describe
from yeto.cli.progress_view import LiveView, _eta
from yeto.schemas.fleet import RunLaunched
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.run_view import fold
from yeto.schemas.training import LearnerProgress
from yeto.services.planner.estimate import plan_estimate, seconds_left

sys.path.insert(0, str(Path(__file__).parents[1] / "tape"))
from tape_events import T0, at, scripted_run

pytestmark = pytest.mark.timeout(60)

CPU = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}
A100 = {"cloud": "aws", "gpu": "A100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": False, "price_per_hour": 20.0}


def recipe(**limits) -> dict:
    """The README quick start's settings: SmolLM2-135M, LoRA, --seq-len 256, micro batch 1."""
    return {"train": {"model": "smollm2-135m", "data": "d.jsonl", "seq_len": 256, "micro_batch": 1, "max_steps": 60},
            "limits": limits}


def launched(fleet, rec) -> list:
    return [RunLaunched(id="r-eta-launched", run_id="r-eta", source="launcher", ts=T0, fleet=fleet, recipe=rec)]


def progress(learner: str, step: int, step_time_s: float, minutes: float) -> LearnerProgress:
    return LearnerProgress(id=f"r-eta-{learner}-{step}", run_id="r-eta", source="learner", learner=learner, step=step,
                           loss=2.0, tokens=step * 256, tokens_per_s=256 / step_time_s, step_time_s=step_time_s, lr=1e-4,
                           ts=at(minutes))


def test_the_quick_start_is_planned_at_the_measured_cpu_pace_and_costs_nothing():
    est = plan_estimate([CPU, CPU], LaunchRecipe.upcast(recipe(max_steps=60)), weights_gb=0.27)
    # 256 tokens x 4 FLOPs x 135M parameters = 138 GFLOPs a step over 0.02 TFLOPs: 6.9 s; 60 steps + 30 s to start
    assert est.step_s == pytest.approx(6.912, rel=1e-3) and est.seconds == pytest.approx(30 + 60 * 6.912, rel=1e-3)
    assert est.usd == 0.0 and "~7 min 25 s" in est.render()


def test_a_cloud_plan_counts_the_head_and_every_island_and_the_soonest_limit_ends_it():
    rec = LaunchRecipe.upcast(recipe(max_steps=100_000, max_time_s=1800.0)).updated(prices={"head_price_per_hour": 0.5})
    est = plan_estimate([A100, A100], rec, weights_gb=16.0)
    assert est.price_per_hour == 40.5 and est.seconds == 1800.0        # 100,000 steps at 0.066 s would take 6,564 s
    assert est.usd == pytest.approx(40.5 / 2)
    no_limit = plan_estimate([A100], LaunchRecipe.upcast({"train": {"model": "m", "data": "d"}}), weights_gb=16.0)
    assert no_limit.seconds is None and "until `yeto down`" in no_limit.render()
    assert plan_estimate([A100], rec, weights_gb=None) is None


def test_measured_steps_replace_the_plan_and_the_slowest_learner_ends_the_run():
    view = fold(None, launched([CPU, CPU], recipe(max_steps=60))[0])
    planned = seconds_left(view, at(1))
    assert planned == pytest.approx(30 + 60 * 6.912 - 60, rel=1e-3)          # the plan, less the minute since launch
    for e in (progress("island-0", 10, 2.0, 2), progress("island-1", 5, 3.0, 2)):
        view = fold(view, e)
    assert seconds_left(view, at(2)) == 55 * 3.0                             # island-1: 55 steps left at 3 s
    capped = fold(None, launched([CPU], recipe(max_steps=60, max_time_s=150.0))[0])
    assert seconds_left(fold(capped, progress("island-0", 10, 2.0, 2)), at(2)) == 30.0   # --max-time comes first


def test_status_and_the_terminal_show_the_same_eta_from_the_same_function():
    events = [*launched([CPU, CPU], recipe(max_steps=60)), progress("island-0", 20, 4.0, 3), progress("island-1", 12, 5.0, 3)]
    view = None
    for e in events:
        view = fold(view, e)
    now = events[-1].ts
    left = seconds_left(view, now)
    assert left == 48 * 5.0
    assert f"ETA ~{left / 60:.1f} min (step 20/60)" in describe(view, now)
    console = Console(record=True, force_terminal=True, width=160, file=io.StringIO())
    live = LiveView(console, live=False)
    for e in events:
        live.line(e)
    console.print(live)
    text = console.export_text()
    assert f"run ETA {_eta(left)}" in text and _eta(left) == "4:00"
    assert re.search(r"island-1 g0 .* ETA 4:00", text)                        # its own bar: 48 steps at 5 s


def test_a_finished_run_has_no_eta():
    view = None
    for e in scripted_run("r-done"):
        view = fold(view, e)
    assert seconds_left(view, view.last_ts + timedelta(minutes=1)) is None
