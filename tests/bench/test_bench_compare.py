"""compare_diloco's machinery on a tiny model: the real DilocoHook + SyncerCore islands are deterministic,
merge every round with every island, and export the syncer's state as a working model; the CLI plans."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lib_arms  # noqa: E402
import lib_compare  # noqa: E402
import lib_task  # noqa: E402

from yeto.learners.torch.api import TrainRecipe  # noqa: E402
from yeto.schemas.recipe import SyncConfig  # noqa: E402


def test_compare_dry_run_prints_every_arm():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_diloco.py"), "--settings", "all", "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in ["sync", *lib_compare.SETTINGS]:
        assert f"arm {name}:" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "dry_run=ok"
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_diloco.py"), "--settings", "nope", "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown setting" in bad.stderr


def test_overrides_and_deltas():
    assert lib_compare.parse_overrides(["outer_lr=1", "quorum=None", "merge=avg"]) == {
        "outer_lr": 1, "quorum": None, "merge": "avg"}
    assert lib_compare.deltas_pct([1.01, 2.0], [1.0, 2.0]) == pytest.approx([1.0, 0.0])
    with pytest.raises(ValueError):
        lib_compare.parse_overrides(["outer_lr"])


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    work = tmp_path_factory.mktemp("cmp")
    model = lib_task.write_tiny_model(work / "model", layers=2, hidden=32)
    data = lib_task.write_markov_chat(work / "chat.jsonl", rows=600)
    return TrainRecipe(model=str(model), data=str(data), tuning="full", lr=3e-3, warmup_steps=2, max_steps=16,
                       micro_batch=2, seq_len=64, heldout_fraction=0.05)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_islands_are_deterministic_and_export_the_syncer_state(recipe):
    torch.set_num_threads(1)
    sync = SyncConfig(num_fragments=2, inner_steps=4)
    runs = [lib_arms.run_yeto(recipe, sync, 2, heldout_blocks=8) for _ in range(2)]
    assert runs[0].heldout_ce == runs[1].heldout_ce            # simulated time: the same order of events every run
    stats = runs[0].stats
    assert stats["rounds"] >= 2 * (16 // 4) - 2 and stats["responders"] == 2.0 and stats["rejected"] == 0
    assert 0.5 < stats["goodput"] <= 1.0
    base = lib_arms.run_sync(recipe.replace(max_steps=1, lr=1e-9), 2, heldout_blocks=8).heldout_ce
    assert runs[0].heldout_ce < base - 0.02                    # the exported state is the trained model
    assert runs[0].tokens == lib_arms.run_sync(recipe, 2, heldout_blocks=8).tokens   # equal tokens


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_straggler_with_quorum_one_merges_without_it(recipe):
    torch.set_num_threads(1)
    out = lib_arms.run_yeto(recipe, SyncConfig(num_fragments=2, inner_steps=4, quorum=1, grace_max_s=0.0), 2,
                            step_s=[1.0, 3.0], heldout_blocks=8)
    assert out.stats["responders"] < 2.0


def _cli(*flags, timeout=60):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks/compare_diloco.py"), *flags],
                          capture_output=True, text=True, timeout=timeout)


def test_t_interval_matches_the_hand_computation():
    # n = 5, mean 3, sample sd sqrt(2.5); t_0.975(4) = 2.7764 -> half width 2.7764 * sqrt(2.5 / 5) = 1.96322
    mean, lo, hi = lib_compare.ci95([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == 3.0 and lo == pytest.approx(1.03678, abs=1e-4) and hi == pytest.approx(4.96322, abs=1e-4)
    # two values: t(1) = 12.7062, sd = |a - b| / sqrt 2, se = sd / sqrt 2 = |a - b| / 2
    assert lib_compare.ci95([0.0, 2.0]) == pytest.approx((1.0, 1.0 - 12.7062, 1.0 + 12.7062))
    assert lib_compare.ci95([0.5]) is None
    # beyond the table: the expansion against t_0.975(40) = 2.02108 and t_0.975(120) = 1.97993
    assert lib_compare.t975(40) == pytest.approx(2.02108, abs=1e-4)
    assert lib_compare.t975(120) == pytest.approx(1.97993, abs=1e-4)
    with pytest.raises(ValueError):
        lib_compare.t975(0)
    # the headline pairs per seed: Δ% = 1, 2, 3, 4, 5 against a sync CE of 1.0
    line = lib_compare.headline("default", [1.01, 1.02, 1.03, 1.04, 1.05], [1.0] * 5)
    assert line == "default_delta_pct=+3.000 ci95=[+1.037,+4.963] n=5"


def test_sweep_picks_the_lowest_mean_and_scales_warmup():
    sweep = {1e-3: [3.90, 3.80], 3e-3: [3.70, 3.75], 6e-3: [3.60, 3.86]}   # means 3.85, 3.725, 3.73
    assert lib_compare.best_lr(sweep) == 3e-3
    assert lib_compare.best_lr({1e-3: [3.7], 2e-3: [3.7]}) == 1e-3       # a tie goes to the smaller lr
    assert [lib_compare.scaled_warmup(lr, 3e-3, 10) for lr in (1e-3, 3e-3, 6e-3, 1e-5)] == [3, 10, 20, 1]
    assert lib_compare.scaled_warmup(6e-3, 3e-3, 0) == 0
    rows = lib_compare.sweep_table("sync", sweep, {1e-3: 3, 3e-3: 10, 6e-3: 20}, [100, 101])
    assert rows[0] == "| sync lr | warmup | CE seed 100 | CE seed 101 | mean CE |"
    assert rows[3] == "| 0.003 **best** | 10 | 3.7000 | 3.7500 | 3.7250 |"
    assert lib_compare.parse_lrs("3e-3,1e-3", "--sync-lrs") == [1e-3, 3e-3]
    for bad in ("1e-3", "1e-3,1e-3", "1e-3,-1", "1e-3,fast"):
        with pytest.raises(ValueError, match="--sync-lrs"):
            lib_compare.parse_lrs(bad, "--sync-lrs")
    assert lib_compare.parse_lrs("1e-2", "--yeto-lrs", least=1) == [1e-2]     # one lr: the arm at it, not a sweep
    for bad in ("", "1e-2,1e-2", "0"):
        with pytest.raises(ValueError, match="--yeto-lrs"):
            lib_compare.parse_lrs(bad, "--yeto-lrs", least=1)
    curve = [[20, 3.9], [40, 3.7], [60, 3.65], [80, 3.66]]
    assert lib_compare.steps_to_target(curve, 3.7) == 40
    assert lib_compare.steps_to_target(curve, 3.6) is None


@pytest.mark.parametrize("flags, message", [
    (["--seeds", "0,1,2", "--sync-lrs", "1e-3,3e-3", "--tune-seeds", "2,100"], "tuning seed(s) 2 are also reporting seeds"),
    (["--sync-lrs", "3e-3"], "a sweep needs at least two distinct positive learning rates"),
    (["--tune-seeds", "100,101"], "there is nothing to tune"),
    (["--tune-only"], "there is nothing to run"),
    (["--seeds", "0,0"], "a seed is listed twice"),
    (["--eval-every", "-5"], "--eval-every -5"),
])
def test_bad_sweep_flags_are_refused_with_a_reason(flags, message):
    out = _cli(*flags, "--dry-run")
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_dry_run_prints_the_sweep_and_its_runs():
    out = _cli("--settings", "default", "--seeds", "0,1,2,3,4", "--sync-lrs", "1e-3,2e-3,3e-3,6e-3", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert ("sweep sync: lr 0.001 (warmup 3), 0.002 (warmup 7), 0.003 (warmup 10), 0.006 (warmup 20) "
            "on tuning seeds 100,101") in out.stdout
    assert "runs=18 " in out.stdout                       # 5 seeds x 2 arms + 4 lrs x 2 tuning seeds


def test_one_yeto_lr_runs_the_yeto_arms_on_the_tuning_seeds():
    out = _cli("--settings", "default,H12", "--recipe", "outer_lr=1.0", "--yeto-lrs", "1e-2", "--tune-only", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "sweep default: lr 0.01 (warmup 33) on tuning seeds 100,101" in out.stdout
    assert "sweep sync" not in out.stdout
    assert "runs=4 " in out.stdout                        # 2 arms x 1 lr x 2 tuning seeds; no reporting seeds


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_yeto_lr_with_tune_only_runs_the_yeto_arm_on_the_tuning_seeds_alone(tmp_path):
    out_json = tmp_path / "out.json"
    out = _cli("--settings", "default", "--recipe", "inner_steps=4", "--yeto-lrs", "1e-2", "--tune-seeds", "7", "--tune-only",
               "--layers", "2", "--hidden", "32", "--steps", "8", "--micro-batch", "2", "--seq-len", "64",
               "--heldout-blocks", "4", "--workdir", str(tmp_path / "work"), "--out", str(out_json), timeout=240)
    assert out.returncode == 0, out.stderr
    got = json.loads(out_json.read_text())
    assert [(r["seed"], r["lr"]) for r in got["sweeps"]["default"]] == [(7, 1e-2)] and "sync" not in got["sweeps"]
    assert got["lrs"] == {"sync": 3e-3, "default": 1e-2} and got["results"] == {"sync": [], "default": []}
    assert got["args"]["recipe"] == ["inner_steps=4"] and got["sweeps"]["default"][0]["stats"]["rounds"] > 0
    assert "default: lr 0.01 (one lr, also run on tuning seeds 7)" in out.stdout


def test_reuse_takes_only_the_sync_runs_of_an_output_with_another_recipe(tmp_path):
    import compare_diloco
    old = tmp_path / "old.json"
    args = {"model": None, "data": None, "tuning": None, "recipe": ["outer_lr=1.0"], "islands": 2, "steps": 240,
            "micro_batch": 4, "seq_len": 128, "lr": 3e-3, "warmup": 10, "layers": 4, "hidden": 64, "device": "cpu",
            "heldout_blocks": 64, "eval_every": 20}
    run = {"seed": 0, "lr": 1e-2, "warmup": 33, "heldout_ce": 3.5}
    base = SyncConfig.from_dict({**SyncConfig().to_dict(), "outer_lr": 1.0}).to_dict()
    output = {"args": args, "base": base, "sweeps": {"sync": [{**run, "seed": 100}], "default": [{**run, "seed": 100}]},
              "results": {"sync": [run], "default": [run]}}
    old.write_text(json.dumps(output))
    sync_only = [("sync", 0, 1e-2, 33, 20), ("sync", 100, 1e-2, 33, 0)]
    compare_diloco.REUSED.clear()
    try:
        compare_diloco.load_reused(compare_diloco.parse(["--recipe", "momentum=0.5", "--reuse", str(old)]))
        assert sorted(compare_diloco.REUSED) == sync_only
        compare_diloco.REUSED.clear()
        compare_diloco.load_reused(compare_diloco.parse(["--recipe", "outer_lr=1.0", "--reuse", str(old)]))
        assert len(compare_diloco.REUSED) == 4                   # the same recipe: the Yeto runs too
        # the same flags, but the defaults of the day the output was made differ (or lack a field added since):
        # its Yeto runs are another recipe's, its sync runs still the same
        for then in ({**base, "momentum": 0.5}, {k: v for k, v in base.items() if k != "alpha"}):
            compare_diloco.REUSED.clear()
            old.write_text(json.dumps({**output, "base": then}))
            compare_diloco.load_reused(compare_diloco.parse(["--recipe", "outer_lr=1.0", "--reuse", str(old)]))
            assert sorted(compare_diloco.REUSED) == sync_only
        old.write_text(json.dumps(output))
        with pytest.raises(ValueError, match="made with other --recipe, --steps"):
            compare_diloco.load_reused(compare_diloco.parse(["--steps", "8", "--reuse", str(old)]))
    finally:
        compare_diloco.REUSED.clear()


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_tuned_sync_runs_on_the_reporting_seeds_at_the_swept_best(tmp_path):
    out_json = tmp_path / "out.json"
    flags = ["--settings", "default", "--seeds", "0,1", "--sync-lrs", "1e-3,1e-2", "--tune-seeds", "7", "--eval-every", "4",
             "--layers", "2", "--hidden", "32", "--steps", "8", "--micro-batch", "2", "--seq-len", "64",
             "--heldout-blocks", "4", "--workdir", str(tmp_path / "work")]
    out = _cli(*flags, "--out", str(out_json), timeout=280)
    assert out.returncode == 0, out.stderr
    got = json.loads(out_json.read_text())
    sweep = {lr: [r["heldout_ce"] for r in got["sweeps"]["sync"] if r["lr"] == lr] for lr in (1e-3, 1e-2)}
    assert [r["seed"] for r in got["sweeps"]["sync"]] == [7, 7]                  # tuned on the tuning seed only
    best = lib_compare.best_lr(sweep)
    assert got["lrs"] == {"sync": best, "default": 3e-3}
    assert f"sync_best_lr={best:g} on tuning seeds 7" in out.stdout
    for run in got["results"]["sync"]:
        assert run["lr"] == best and run["warmup"] == lib_compare.scaled_warmup(best, 3e-3, 10)
    for runs in got["results"].values():
        assert [r["seed"] for r in runs] == [0, 1]
        for run in runs:                    # evaluated every 4 steps; the last point is the final model
            assert [s for s, _ in run["curve"]] == [4, 8] and run["curve"][-1][1] == run["heldout_ce"]
    last = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"default_delta_pct=[+-]\d+\.\d{3} ci95=\[[+-]\d+\.\d{3},[+-]\d+\.\d{3}\] n=2", last), last
    # --reuse: the same command runs nothing again (deterministic runs) and prints the same result
    again = _cli(*flags, "--reuse", str(out_json), timeout=120)
    assert again.returncode == 0, again.stderr
    ran = [line for line in again.stdout.splitlines() if line.startswith("seed ")]
    assert len(ran) == 2 + 2 * 2 and all("(from out.json)" in line for line in ran)
    assert again.stdout.strip().splitlines()[-1] == last


def test_reuse_refuses_an_output_of_another_task(tmp_path):
    old = tmp_path / "old.json"
    args = {"model": None, "data": None, "tuning": None, "recipe": [], "islands": 2, "steps": 999, "micro_batch": 4,
            "seq_len": 128, "lr": 3e-3, "warmup": 10, "layers": 4, "hidden": 64, "device": "cpu", "heldout_blocks": 64}
    old.write_text(json.dumps({"args": args, "results": {}}))
    out = _cli("--reuse", str(old), "--dry-run")
    assert out.returncode == 2 and "made with other --steps\n" in out.stderr, out.stderr
    assert _cli("--reuse", str(old), "--steps", "999", "--dry-run").returncode == 0
