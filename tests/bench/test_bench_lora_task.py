"""benchmarks/lora_task.py: its plan (--dry-run), and the script end to end on the tiny random-init model of the
learner tests: real `yeto launch --wait` runs on a local stack, artifacts scored, one JSON per run, the last line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "learner"))
import learner_tiny  # noqa: E402


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
    model = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", 300)
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("".join(json.dumps(r) + "\n" for r in learner_tiny.chat_rows(40, seed=99)))
    out = run("--model", model, "--data", data, "--eval-data", heldout, "--arms", "sync,default", "--steps", "4",
              "--seq-len", "32", "--sync-every", "2", "--lr", "3e-3", "--out-dir", tmp_path / "out", timeout=840)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = {r["arm"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json"))}
    assert set(runs) == {"sync", "default"}
    for r in runs.values():
        assert r["outcome"] == "RunFinalized" and r["exit_code"] == 0 and r["max_step"] == 4
        assert 0 < r["heldout_ce"] < 10 and r["rounds_merged"] > 0 and r["bytes_up"] > 0
    # equal tokens: one island of two DDP ranks trains what two one-rank islands train
    assert runs["sync"]["labelled_tokens"] == runs["default"]["labelled_tokens"] > 0
    assert runs["sync"]["learners"] == 1 and runs["default"]["learners"] == 2
    last = out.stdout.strip().splitlines()[-1]
    delta = 100 * (runs["default"]["heldout_ce"] - runs["sync"]["heldout_ce"]) / runs["sync"]["heldout_ce"]
    assert last == f"default_delta_pct={delta:+.3f}"


def test_report_pairs_arms_by_seed(tmp_path):
    base = {"labelled_tokens": 100, "wall_s": 60.0, "rounds_merged": 8, "bytes_up": 2e6, "bytes_down": None}
    for arm, seed, ce in (("sync", 0, 2.0), ("sync", 1, 4.0), ("default", 0, 2.1), ("default", 1, 4.0), ("direct", 0, None)):
        (tmp_path / f"lora-{arm}-s{seed}-x.json").write_text(json.dumps({**base, "arm": arm, "seed": seed, "heldout_ce": ce}))
    out = run("--report", tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "default_delta_pct=+2.500"       # (+5 % at seed 0, 0 at seed 1) / 2
    assert "| default | 0,1 | 3.0500 ± 1.3435 | +2.50 [+0.00, +5.00] | 100 | 60 | 8 | 2.00 | - |" in lines
    assert "| direct | 0 | - | - | - | - | - | - | - |" in lines
