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
    (["scripts/smoke_models.py", "--tier", "small"], "tiny-llama (built here)"),
    (["scripts/benchmark_diffusion_diloco.py", "--model", "Lightricks/LTX-Video", "--data", "media", "--height", "512",
      "--width", "512", "--settings", "all"], "arm straggler_q1:"),
])
def test_dry_runs(argv, expect):
    out = run(*argv, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout and out.stdout.strip().splitlines()[-1] == "dry_run=ok"


def test_chaos_schedule_is_seeded():
    a, b = run("benchmarks/chaos.py", "--seed", "3", "--dry-run"), run("benchmarks/chaos.py", "--seed", "3", "--dry-run")
    assert a.stdout == b.stdout and "(40.0," in a.stdout


def test_bad_flags_exit_2_with_a_message():
    out = run("scripts/smoke_models.py", "--tier", "huge", "--dry-run")
    assert out.returncode == 2 and "unknown tier" in out.stderr
    out = run("scripts/benchmark_diffusion_diloco.py", "--model", "m", "--data", "d", "--height", "64", "--width", "32")
    assert out.returncode == 2 and "--height equal to --width" in out.stderr
