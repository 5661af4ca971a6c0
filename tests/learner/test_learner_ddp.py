"""DDP inside an island: two gloo ranks on the CPU train exactly like one rank on the same global batch."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny

WORKER = Path(__file__).parent / "learner_ddp_worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_island(world_size: int, model_dir: Path, out: Path) -> list[float]:
    port = _free_port()
    procs = []
    for rank in range(world_size):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(out), str(model_dir)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for proc in procs:
        output, _ = proc.communicate(timeout=150)
        assert proc.returncode == 0, output[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_gloo_ranks_match_one_rank_on_the_same_global_batch(tmp_path):
    model_dir = learner_tiny.write_model_dir(tmp_path / "model")
    single = _run_island(1, model_dir, tmp_path / "one.json")
    double = _run_island(2, model_dir, tmp_path / "two.json")
    assert len(single) == len(double) == 6
    assert single[-1] < single[0]           # it trained, so the comparison means something
    for a, b in zip(single, double):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5)
