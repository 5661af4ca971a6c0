"""Every benchmark script's --dry-run prints its plan and ends with `dry_run=ok`; bad flags exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*argv):
    return subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("argv, expect", [
    (["benchmarks/chaos.py", "--kills", "3", "--seed", "1"], "kills (s after all train, island)="),
    (["benchmarks/smoke_models.py", "--tier", "small"], "tiny-llama (built here)"),
    (["benchmarks/lora_merge.py", "--warm", "8", "--interval", "4,16"], "intervals=[4, 16]"),
    (["benchmarks/diffusion_diloco.py", "--model", "Lightricks/LTX-Video", "--data", "media", "--height", "512",
      "--width", "512", "--settings", "all"], "arm straggler_q1:"),
    (["benchmarks/diffusion_diloco.py", "--model", "ltx-video", "--frames", "9", "--height", "32", "--width", "32"],
     "model=tiny random-init ltx-video (built) data=moving squares (built) media=9x32x32"),
])
def test_dry_runs(argv, expect):
    out = run(*argv, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout and out.stdout.strip().splitlines()[-1] == "dry_run=ok"


def test_chaos_schedule_is_seeded():
    a, b = run("benchmarks/chaos.py", "--seed", "3", "--dry-run"), run("benchmarks/chaos.py", "--seed", "3", "--dry-run")
    assert a.stdout == b.stdout and "(40.0," in a.stdout


def test_bad_flags_exit_2_with_a_message():
    out = run("benchmarks/lora_merge.py", "--warm", "200", "--interval", "200", "--dry-run")
    assert out.returncode == 2 and "passes --total-steps" in out.stderr
    out = run("benchmarks/smoke_models.py", "--tier", "huge", "--dry-run")
    assert out.returncode == 2 and "unknown tier" in out.stderr
    out = run("benchmarks/diffusion_diloco.py", "--model", "sd", "--frames", "9", "--height", "32", "--width", "32")
    assert out.returncode == 2 and "ltx-video and wan take clips (--frames 9), sd, sd3 and flux images" in out.stderr


def _chaos_json(path: Path, seed: int, islands: int, clean_ce: float, faulty_ce: float, exited_s: float) -> None:
    import json
    kill = {"island": 1, "kill_to_next_global_s": exited_s + 0.05, "exited_to_next_global_s": exited_s,
            "rounds_merged_while_down": 4, "down_until_rejoin_s": 12.0}
    common = {"goodput": 0.99, "goodput_time": 0.5, "rejoin_s": [11.0]}
    path.write_text(json.dumps({"argv": ["--islands", str(islands), "--seed", str(seed)], "kills": [[40.0, 1]],
                                "clean": {**common, "heldout_ce": clean_ce, "rejoin_s": []},
                                "faulty": {**common, "heldout_ce": faulty_ce, "kills": [kill]}}))


def test_chaos_report_pairs_each_seed_with_its_fault_free_run(tmp_path):
    _chaos_json(tmp_path / "a.json", 0, 2, 4.0, 4.03, 0.2)      # +0.75%: within 1%
    _chaos_json(tmp_path / "b.json", 1, 2, 2.0, 2.06, 6.0)      # +3.00%, and the next global too late
    _chaos_json(tmp_path / "c.json", 0, 3, 3.0, 2.97, 0.1)      # another island count: its own row
    out = run("benchmarks/chaos.py", "--report", tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.stdout.splitlines() if line.startswith("| 2 ") or line.startswith("| 3 ")}
    assert rows["2"][0] == "0,1" and rows["2"][1].startswith("+1.88 [") and rows["2"][2] == "1/2"
    assert rows["2"][7] == "1/2"                                 # 6.0 s after IslandExited misses the 5 s bound
    assert rows["3"][1] == "-1.00 (n=1)" and rows["3"][2] == "1/1"


def test_startup_dry_run_names_its_stages_and_refuses_an_arm_that_is_not_a_frozen_copy(tmp_path):
    out = run("benchmarks/startup.py", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "stages=cli,stack,services,spawn,import,build,connect,data,first_step" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "dry_run=ok"
    bad = run("benchmarks/startup.py", "--arm", f"x={tmp_path}", "--dry-run")
    assert bad.returncode == 2 and "scripts/frozen.sh" in bad.stderr
