"""scripts/gpu_check.sh's megatron_ep step, dry (GPU_CHECK_DRY=1): the same command a lent GPU runs with NCCL and the
all-to-all dispatcher runs here on two gloo ranks with the all-gather one, and passes its thresholds."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("megatron.core")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_dry_megatron_step_passes_its_thresholds():
    env = {**os.environ, "GPU_CHECK_DRY": "1", "GPU_CHECK_STEPS": "megatron_ep", "PY": sys.executable,
           "YETO": str(Path(sys.executable).parent / "yeto")}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=380)
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"^PASS megatron_ep .*ep=2 logit_diff=(\S+) loss\(first, last\)=(\S+) (\S+) ok", out.stdout, re.M)
    assert found, out.stdout
    assert float(found[1]) <= 1e-3 and float(found[3]) < 0.7 * float(found[2])
