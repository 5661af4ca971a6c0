"""benchmarks/lora_task.py: its plan (--dry-run), and the script end to end on the tiny random-init model of the
learner tests: real `yeto launch --wait` runs on a local stack, artifacts scored, one JSON per run, the last line."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

sys.path.insert(0, str(ROOT / "benchmarks"))
import lora_task  # noqa: E402

from yeto.learners.torch.api import tiny  # noqa: E402


def run(*argv, timeout=120):
    """The script; past `timeout` it gets SIGTERM, on which it takes its stack down before exiting."""
    proc = subprocess.Popen([sys.executable, "benchmarks/lora_task.py", *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_dry_run_prints_every_arms_launch():
    out = run("--dry-run", "--seeds", "0,1", "--device", "cuda", "--scale", "4")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "dry_run=ok" and "steps=240 seq_len=256" in lines[0]
    assert "--gpu local:2xcuda" in out.stdout and "--shard ddp" in out.stdout
    assert "--gpu local:1xcuda,local:1xcuda" in out.stdout
    assert "--outer-lr 1.0 --outer-momentum 0.0 --merge-alpha 0.0" in out.stdout


def test_bad_arm_exits_2():
    out = run("--arms", "sync,nope", "--dry-run")
    assert out.returncode == 2 and "--arms" in out.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_end_to_end_on_the_tiny_model(tmp_path):
    model = tiny.write_model_dir(tmp_path / "model")
    data = tiny.write_chat_jsonl(tmp_path / "chat.jsonl", 300)
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("".join(json.dumps(r) + "\n" for r in tiny.chat_rows(40, seed=99)))
    out = run("--model", model, "--data", data, "--eval-data", heldout, "--arms", "sync,default", "--steps", "4",
              "--seq-len", "32", "--sync-every", "2", "--lr", "3e-3", "--out-dir", tmp_path / "out", timeout=840)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = {r["arm"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json"))}
    assert set(runs) == {"sync", "default"}
    for r in runs.values():
        assert r["outcome"] == "RunFinalized" and r["exit_code"] == 0 and r["max_step"] == 4
        assert 0 < r["heldout_ce"] < 10 and r["rounds_merged"] > 0 and r["bytes_up"] > 0
        assert 0 <= r["single_rounds"] <= r["rounds_merged"]
        # no island replaced: the tape's count of the pushes (every generation's) is what the learners said they sent,
        # less at most each learner's last push of every fragment (one that came after the final cut never merged)
        low = r["bytes_up_logs"] - r["learners"] * r["push_set_bytes"]
        assert low <= r["bytes_up"] <= r["bytes_up_logs"], (r["bytes_up"], r["bytes_up_logs"], r["bytes_up_by_learner"])
    # equal tokens: one island of two DDP ranks trains what two one-rank islands train
    assert runs["sync"]["labelled_tokens"] == runs["default"]["labelled_tokens"] > 0
    assert runs["sync"]["learners"] == 1 and runs["default"]["learners"] == 2
    # the SyncConfig each ran, from its RunLaunched: the arm's flags over the defaults
    assert runs["default"]["sync_config"] == {**lora_task.DEFAULT_SYNC, "inner_steps": 2}
    assert runs["sync"]["sync_config"] == {**lora_task.DEFAULT_SYNC, "inner_steps": 2, **lora_task.DIRECT}
    last = out.stdout.strip().splitlines()[-1]
    delta = 100 * (runs["default"]["heldout_ce"] - runs["sync"]["heldout_ce"]) / runs["sync"]["heldout_ce"]
    assert last == f"default_delta_pct={delta:+.3f} ci95=[nan,nan] n=1"


def test_report_pairs_arms_by_seed(tmp_path):
    # no single_rounds: runs from before it was counted
    base = {"labelled_tokens": 100, "wall_s": 60.0, "rounds_merged": 8, "bytes_up": 2e6, "bytes_down": None}
    for arm, seed, ce in (("sync", 0, 2.0), ("sync", 1, 4.0), ("default", 0, 2.1), ("default", 1, 4.0), ("direct", 0, None)):
        (tmp_path / f"lora-{arm}-s{seed}-x.json").write_text(json.dumps({**base, "arm": arm, "seed": seed, "heldout_ce": ce}))
    out = run("--report", tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    # (+5 % at seed 0, 0 at seed 1) / 2; 95% CI 2.5 ± t(1) 12.7062 x sd 3.5355 / sqrt 2
    assert lines[-1] == "default_delta_pct=+2.500 ci95=[-29.266,+34.266] n=2"
    assert ("| default | - | - | 0,1 | 3.0500 ± 1.3435 | +2.50 [-29.27, +34.27] | [+0.00, +5.00] | 100 | 60 | 8 | - | 2.00 | - |"
            in lines)
    assert "| direct | - | - | 0 | - | - | - | - | - | - | - | - | - |" in lines


def fake(arm, seed, ce, lr, **kw):
    return {"arm": arm, "seed": seed, "heldout_ce": ce, "lr": lr, "warmup": lora_task.scaled_warmup(lr, 1e-3, 5),
            "labelled_tokens": 100, "wall_s": 60.0, "rounds_merged": 8, "single_rounds": 3, "bytes_up": 2e6,
            "bytes_down": 0, **kw}


def test_report_tunes_sync_on_the_tuning_seeds_and_pairs_against_its_best_lr():
    runs = [fake("sync", 100, 2.3, 1e-3), fake("sync", 100, 2.1, 2e-3), fake("sync", 100, 2.2, 4e-3),
            fake("sync", 101, 2.5, 1e-3), fake("sync", 101, 2.3, 2e-3), fake("sync", 101, 2.1, 4e-3),
            fake("sync", 102, 1.0, 4e-3),                                # 102 lacks two lrs: left out of the sweep
            fake("sync", 0, 2.0, 1e-3), fake("sync", 1, 3.0, 1e-3),      # the untuned recipe on the reporting seeds
            fake("sync", 0, 1.9, 2e-3), fake("sync", 1, 2.5, 2e-3),
            fake("default", 0, 2.09, 1e-3), fake("default", 1, 2.5, 1e-3)]
    lines = lora_task.report(runs, [100, 101, 102])
    assert "sync_lr_best=0.004" in lines                                       # mean 2.15 < 2.2 < 2.4
    assert "| 0.002 | 10 | 2.1000 | 2.3000 | 2.2000 |" in lines
    assert "| 0.004 **best** | 20 | 2.2000 | 2.1000 | 2.1500 |" in lines
    assert any(line.startswith("| sync lr | warmup | CE seed 100 | CE seed 101 | mean CE |") for line in lines)
    # no reporting sync run at 4e-3: the reference is sync's first lr; the report says so by its rows
    assert "| sync | 0.001 | - | 0,1 | 2.5000 ± 0.7071 | 0 (reference) | - | 100 | 60 | 8 | 3 | 2.00 | 0.00 |" in lines
    assert lines[-1].startswith("default_delta_pct=-")


def test_report_pairs_against_the_swept_lr_with_a_paired_t_interval():
    runs = [fake("sync", 100, 2.3, 1e-3), fake("sync", 100, 2.1, 2e-3),
            fake("sync", 0, 2.0, 1e-3), fake("sync", 1, 3.0, 1e-3), fake("sync", 2, 2.5, 1e-3),
            fake("sync", 0, 2.0, 2e-3), fake("sync", 1, 2.0, 2e-3), fake("sync", 2, 2.0, 2e-3),
            fake("default", 0, 2.02, 1e-3), fake("default", 1, 2.04, 1e-3), fake("default", 2, 2.06, 1e-3)]
    lines = lora_task.report(runs, [100])
    assert "sync_lr_best=0.002" in lines
    assert "| sync | 0.002 | - | 0,1,2 | 2.0000 ± 0.0000 | 0 (reference) | - | 100 | 60 | 8 | 3 | 2.00 | 0.00 |" in lines
    assert any(line.startswith("| sync | 0.001 | - | 0,1,2 | 2.5000 ± 0.5000 | +25.00 [") for line in lines)  # untuned: worse
    # Δ +1, +2, +3 %: mean 2, sd 1, t(2) 4.3027 / sqrt 3 = 2.4842
    assert any(line.startswith("| default | 0.001 | - | 0,1,2 | 2.0400 ± 0.0200 | +2.00 [-0.48, +4.48] | [+1.00, +3.00] |")
               for line in lines)
    assert lines[-1] == "default_delta_pct=+2.000 ci95=[-0.484,+4.484] n=3"


def test_the_last_line_pairs_default_at_the_tuned_lr_where_it_ran_there():
    runs = [fake("sync", 100, 2.3, 1e-3), fake("sync", 100, 2.1, 2e-3),
            fake("sync", 0, 2.0, 1e-3), fake("sync", 0, 1.5, 2e-3), fake("sync", 1, 1.6, 2e-3),
            fake("default", 0, 2.2, 1e-3), fake("default", 0, 1.53, 2e-3), fake("default", 1, 1.68, 2e-3)]
    lines = lora_task.report(runs, [100])
    assert any(line.startswith("| default | 0.001 | - | 0 | 2.2000 ± 0.0000 | +46.67 (n=1) |") for line in lines)
    assert any(line.startswith("| default | 0.002 | - | 0,1 | 1.6050 ± 0.1061 | +3.50 [") for line in lines)
    assert lines[-1].startswith("default_delta_pct=+3.500 ci95=[") and lines[-1].endswith(" n=2")


def test_arm_recipes_scale_warmup_with_lr_and_pass_candidate_flags():
    args = lora_task.parse(["--seeds", "0,1", "--sync-lr", "4e-3", "--candidate", "outer_lr=0.8,momentum=0.5 alpha=0.3 lr=2e-3"])
    assert args.arm_names == ["sync", "default", "direct", "candidate"]
    assert lora_task.arm_recipe(args, "sync") == (4e-3, 20, {"outer_lr": 1.0, "momentum": 0.0, "alpha": 0.0})
    assert lora_task.arm_recipe(args, "sync", 2e-3)[:2] == (2e-3, 10)       # a sweep point beats --sync-lr
    assert lora_task.arm_recipe(args, "default") == (1e-3, 5, {})
    argv = lora_task.launch_argv(args, "candidate", 1, "r")
    assert argv[argv.index("--lr") + 1] == "0.002" and argv[argv.index("--warmup-steps") + 1] == "10"
    assert argv[-6:] == ["--outer-lr", "0.8", "--outer-momentum", "0.5", "--merge-alpha", "0.3"]
    assert "--shard" not in argv and "local:1xcpu,local:1xcpu" in argv
    # ddp: the sync arm with rebase (the step trained while a push is in flight is kept), at the sync lr
    argv = lora_task.launch_argv(args, "ddp", 1, "r")
    assert argv[argv.index("--lr") + 1] == "0.004" and argv[argv.index("--shard") + 1] == "ddp"
    assert argv[-8:] == ["--outer-lr", "1.0", "--outer-momentum", "0.0", "--merge-alpha", "0.0", "--global-apply", "rebase"]


def test_avg_arm_and_a_candidate_merge_rule_reach_yeto_launch():
    args = lora_task.parse(["--arms", "avg", "--candidate", "merge=avg outer_lr=1 momentum=0 alpha=0 inner_steps=6"])
    assert lora_task.launch_argv(args, "avg", 0, "r")[-8:] == [
        "--outer-lr", "1.0", "--outer-momentum", "0.0", "--merge-alpha", "0.0", "--merge", "avg"]
    argv = lora_task.launch_argv(args, "candidate", 0, "r")
    assert argv[argv.index("--merge") + 1] == "avg" and argv[argv.index("--sync-every") + 1] == "6"
    ramp = lora_task.launch_argv(lora_task.parse(["--arms", "default", "--candidate",
                                                  "inner_steps_start=6 inner_steps_ramp=60"]), "candidate", 0, "r")
    assert ramp[-4:] == ["--sync-every-start", "6", "--sync-ramp-steps", "60"]


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0,100", "--sync-lrs", "1e-3,2e-3", "--tune-seeds", "100"], "overlap"),
    (["--sync-lrs", "1e-3"], "two lrs or --sync-lr"),
    (["--sync-lrs", "1e-3,1e-3", "--seeds", ""], "distinct"),
    (["--candidate", "keyframe_every=8"], "--candidate"),      # no launch flag sets it
    (["--arms", "sync,candidate"], "--candidate"),
    (["--seeds", ""], "--seeds"),
])
def test_bad_sweep_or_candidate_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        lora_task.parse(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_sweep_run_ids_are_run_ids(monkeypatch):
    """A sweep point's run id names its lr in the characters `yeto launch --run-id` takes (no '.')."""
    args = lora_task.parse(["--seeds", "", "--sync-lrs", "5e-4,2e-3", "--tune-seeds", "100"])
    seen = []
    monkeypatch.setattr(lora_task.subprocess, "run", lambda argv, **kw: seen.append(argv[argv.index("--run-id") + 1])
                        or lora_task.subprocess.CompletedProcess(argv, 0, "", ""))
    monkeypatch.setattr(lora_task, "tape_metrics", lambda env, run: {"outcome": "RunFailed"})
    monkeypatch.setattr(lora_task, "wire_bytes", lambda env, run: {})
    for lr in args.sweep_lrs:
        lora_task.run_one(args, {"YETO_HOME": "/nonexistent"}, "sync", 100, "20261201000000", lr)
    assert seen == ["lora-sync-lr0p0005-s100-20261201000000", "lora-sync-lr0p002-s100-20261201000000"]
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", run) for run in seen)


def test_a_sweep_alone_needs_no_reporting_seed():
    args = lora_task.parse(["--seeds", "", "--sync-lrs", "2e-3,1e-3", "--tune-seeds", "100,101"])
    assert args.seed_list == [] and args.sweep_lrs == [1e-3, 2e-3] and args.tune_seed_list == [100, 101]


def test_runs_at_another_h_or_ramp_get_their_own_rows_and_stay_out_of_the_headline():
    settings = lambda h: {"settings": {"sync_every": h, "fragments": None}}                       # noqa: E731
    runs = [fake("sync", 0, 2.0, 2e-3, **settings(6)), fake("sync", 1, 2.0, 2e-3),                 # sync: H is moot
            fake("default", 0, 2.2, 2e-3), fake("default", 1, 2.4, 2e-3),
            fake("default", 0, 2.1, 2e-3, **settings(6)), fake("default", 1, 2.2, 2e-3, **settings(6)),
            fake("candidate", 0, 2.12, 2e-3, sync_overrides={"inner_steps_start": 6, "inner_steps_ramp": 60}),
            fake("avg", 0, 2.3, 2e-3, sync_overrides=dict(lora_task.AVG))]
    lines = lora_task.report(runs, [])
    assert any(line.startswith("| sync | 0.002 | - | 0,1 | 2.0000 ± 0.0000 | 0 (reference) |") for line in lines)
    assert any(line.startswith("| default | 0.002 | - | 0,1 | 2.3000 ± 0.1414 | +15.00 [") for line in lines)
    assert any(line.startswith("| default | 0.002 | H=6 | 0,1 | 2.1500 ± 0.0707 | +7.50 [") for line in lines)
    assert any(line.startswith("| candidate | 0.002 | H0=6 ramp=60 | 0 | 2.1200 ± 0.0000 | +6.00 (n=1) |") for line in lines)
    assert any(line.startswith("| avg | 0.002 | - | 0 |") for line in lines)                    # its own overrides
    assert lines[-1].startswith("default_delta_pct=+15.000 ")                                    # H 24 runs only
    only_h6 = [r for r in runs if r["arm"] == "sync" or recipe_of_is(r, "H=6")]
    assert lora_task.report(only_h6, [])[-1].startswith("default_delta_pct=+7.500 ")            # one invocation's H


def recipe_of_is(r, label):
    return lora_task.recipe_of(r) == label


def test_runs_that_recorded_their_sync_config_pool_by_it_across_arms_and_directories(tmp_path):
    default = dict(lora_task.DEFAULT_SYNC)
    other = {**default, "momentum_restart": "off" if default["momentum_restart"] != "off" else "opposed"}
    runs = [fake("sync", s, 2.0, 4e-3, run_id=f"sync-{s}", sync_config={**default, **lora_task.DIRECT}) for s in (0, 1, 2)]
    runs += [fake("candidate", 0, 2.2, 4e-3, run_id="cand-0", sync_config=default,
                  sync_overrides={"momentum_restart": default["momentum_restart"]}),      # the default of a later day
             fake("default", 1, 2.0, 4e-3, run_id="def-1", sync_config=default),
             fake("default", 2, 2.1, 4e-3, run_id="def-2", sync_config=other),           # the default of an earlier day
             fake("direct", 0, 2.4, 4e-3, run_id="direct-0", sync_config={**default, **lora_task.DIRECT})]
    assert [lora_task.arm_of(r) for r in runs[3:]] == ["default", "default", "default", "direct"]
    assert lora_task.recipe_of(runs[5]) == f"momentum_restart={other['momentum_restart']}"
    assert lora_task.recipe_of(runs[6]) == "" and lora_task.recipe_of(runs[0]) == ""
    for i, r in enumerate(runs):                        # two directories: the report reads both
        d = tmp_path / ("a" if i % 2 else "b")
        d.mkdir(exist_ok=True)
        (d / f"lora-{r['arm']}-s{r['seed']}-{r['run_id']}.json").write_text(json.dumps(r))
    out = run("--report", tmp_path / "a", tmp_path / "b", "--tune-seeds", "")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert any(line.startswith("| default | 0.004 | - | 0,1 | 2.1000 ± 0.1414 | +5.00 [") for line in lines), lines
    assert any(line.startswith("| default | 0.004 | momentum_restart=") and "| 2 |" in line for line in lines), lines
    assert lines[-1].startswith("default_delta_pct=+5.000 ") and lines[-1].endswith("n=2")
    # one row cannot take two runs of a seed: said, not overwritten
    (tmp_path / "b" / "lora-default-s1-again.json").write_text(json.dumps({**runs[4], "run_id": "def-1-again"}))
    out = run("--report", tmp_path / "a", tmp_path / "b", "--tune-seeds", "")
    assert out.returncode == 2 and "def-1" in out.stderr and "def-1-again" in out.stderr, out.stderr
    out = run("--report", tmp_path / "empty")
    assert out.returncode == 2 and "no lora-*.json" in out.stderr


def test_a_sweep_over_several_seeds_keeps_the_lrs_every_tuning_seed_ran_and_lists_the_others():
    runs = [fake("sync", 100, 2.5, 2e-3), fake("sync", 100, 4.0, 8e-3),            # an earlier one-seed sweep
            *(fake("sync", s, ce, lr) for s, ces in ((100, (2.2, 2.0)), (101, (2.0, 2.3)), (102, (2.1, 2.4)))
              for lr, ce in zip((3e-3, 4e-3), ces))]
    lines = lora_task.report(runs, [100, 101, 102])
    assert "| 0.003 **best** | 15 | 2.2000 | 2.0000 | 2.1000 | 2.1000 |" in lines
    assert "| 0.004 | 20 | 2.0000 | 2.3000 | 2.4000 | 2.2333 |" in lines
    assert "sync_lr_best=0.003" in lines
    assert "sync lr 0.002 on fewer tuning seeds (not a candidate for best): seed 100 2.5000" in lines
    assert "sync lr 0.008 on fewer tuning seeds (not a candidate for best): seed 100 4.0000" in lines


def test_runs_of_different_tasks_are_refused_not_pooled(tmp_path):
    demo = {"data": "/tmp/fz-a/examples/data/chat_demo.jsonl", "eval_data": "/tmp/fz-a/examples/data/heldout_demo.jsonl",
            "steps": 300, "seq_len": 64, "heldout_blocks": 64}
    moved = {**demo, "data": "/tmp/fz-b/examples/data/chat_demo.jsonl"}       # another frozen copy: the same task
    docqa = {**demo, "data": "/x/docqa_train.jsonl", "eval_data": "/x/docqa_heldout.jsonl", "heldout_blocks": 128}
    runs = [fake("sync", 0, 0.2, 3e-3, run_id="s0", settings=demo), fake("default", 0, 0.21, 3e-3, run_id="d0",
                                                                          settings=moved),
            fake("sync", 1, 0.2, 3e-3, run_id="s1", settings={"steps": 300})]  # an old run without every setting
    for r in runs:
        (tmp_path / f"lora-{r['arm']}-s{r['seed']}-{r['run_id']}.json").write_text(json.dumps(r))
    out = run("--report", tmp_path, "--tune-seeds", "")
    assert out.returncode == 0, out.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "lora-default-s1-d1.json").write_text(json.dumps(fake("default", 1, 2.5, 3e-3, run_id="d1", settings=docqa)))
    out = run("--report", tmp_path, other, "--tune-seeds", "")
    assert out.returncode == 2 and "different tasks" in out.stderr and "chat_demo.jsonl, docqa_train.jsonl" in out.stderr
    assert out.stdout == ""
