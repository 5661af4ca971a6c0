"""scripts/gpu_check.sh is right before a GPU runs it: bash parses it, and its dry mode (GPU_CHECK_DRY=1) runs each
step's command on the CPU at tiny size and passes: bf16 LoRA, NF4 QLoRA, FSDP2 launches, the merge against memcpy.
Its last step runs tests/e2e/test_e2e_acceptance.py's two-island test, which the suite runs anyway: here it is
checked to name that test."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
STEPS = ("cuda_bf16_lora", "nf4_qlora", "fsdp2", "merge_vs_memcpy", "round_on_device", "megatron_ep",
         "two_islands_acceptance", "torchft_quantized")


def dry(*steps: str, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_CHECK_DRY": "1", "GPU_CHECK_STEPS": " ".join(steps),   # this interpreter, wherever
           "PY": sys.executable, "YETO": str(Path(sys.executable).parent / "yeto")}  # the checkout (a frozen copy too)
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(120)
def test_the_script_parses_and_its_dry_merge_step_passes_with_its_ratio():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    out = dry("merge_vs_memcpy", timeout=110)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^PASS merge_vs_memcpy .*backend=numpy merge_vs_memcpy=[0-9.]+", out.stdout, re.M), out.stdout
    assert "0 failure(s)" in out.stdout and "FAIL" not in out.stdout


@pytest.mark.timeout(200)
def test_the_dry_round_step_reads_each_sizes_critical_path_against_its_limit():
    """The round on the device (issue 40: 64M values <= 100 ms, 256M <= 400 ms), dry: round.py at 1M and 2M on the CPU,
    each size's critical path read from its row and held against a limit the CPU cannot miss."""
    out = dry("round_on_device", timeout=190)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^PASS round_on_device .*values=1048576 critical_ms=[0-9.]+ limit_ms=100000 within "
                     r"values=2097152 critical_ms=[0-9.]+ limit_ms=100000 within", out.stdout, re.M), out.stdout


def test_the_acceptance_step_runs_a_test_that_exists():
    (selector,) = re.findall(r"tests/e2e/test_e2e_acceptance.py -k \"(\w+)\"", SCRIPT.read_text())
    tests = re.findall(r"^def (test_\w+)", (ROOT / "tests" / "e2e" / "test_e2e_acceptance.py").read_text(), re.M)
    assert [t for t in tests if selector in t], (selector, tests)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_dry_fsdp2_launch_step_passes_with_merged_rounds():
    """One launch step run for real: the three steps share the `launch` function and differ only in flags that the
    flag walk and the NF4 and FSDP2 tests cover (tests/launch/test_launch_flag_walk.py, test_launch_nf4.py,
    tests/e2e/test_e2e_fsdp.py); running all three cost four minutes of the suite."""
    out = dry("fsdp2", timeout=850)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^PASS fsdp2 .*rounds_merged=[1-9]", out.stdout, re.M), out.stdout


def test_every_step_the_docstring_names_is_run_by_the_script():
    ran = re.findall(r"^step (\w+) ", SCRIPT.read_text(), re.M)
    assert tuple(ran) == STEPS, ran
