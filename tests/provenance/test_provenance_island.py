"""An island handed a base model file other than the one launch pinned refuses to train: the real learner exits
with status 2 before its first step, naming the file, and a local island's exit detail (IslandExited on the tape)
carries that reason."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_chat_jsonl, write_model_dir
from waiting import wait_for
from yeto.cli.launch import checks
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import LocalBackend

pytestmark = pytest.mark.timeout(180)
REFUSAL = r"refusing a base model other than the one the run pinned: base model file {}/model.safetensors has sha256"


@pytest.fixture
def swapped(tmp_path):
    """(the train recipe pinned at launch, the base folder), whose weights file was then replaced by another's."""
    base = write_model_dir(tmp_path / "base")
    data = write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=80)
    train = checks.pin_sources({"model": str(base), "data": str(data), "seq_len": 64, "micro_batch": 2, "max_steps": 3,
                                "tuning": "lora", "lora_r": 4}, {"revision": None})
    shutil.copy(write_model_dir(tmp_path / "other", seed=1) / "model.safetensors", base / "model.safetensors")
    return train, base


def test_a_learner_handed_another_base_file_exits_2_naming_it_before_any_step(swapped, tmp_path):
    train, base = swapped
    done = subprocess.run([sys.executable, "-m", "yeto.learners.torch", "--run-id", "r1", "--learner", "island-0",
                           "--no-sync", "--recipe", json.dumps(train)], capture_output=True, text=True, timeout=150,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert REFUSAL.format(base.resolve()) in done.stderr and "launch pinned" in done.stderr
    assert not any(line.startswith("step ") for line in done.stdout.splitlines())      # no step line (console.py)


def test_a_local_island_that_refuses_says_why_in_its_exit_detail(swapped, tmp_path, nats_server):
    train, base = swapped
    backend = LocalBackend(tmp_path / "state", env={"OMP_NUM_THREADS": "1"})
    launch = IslandLaunch(run_id="r-pin", island=0, generation=0, num_islands=1, nats_url=nats_server.url,
                          spec={"cloud": "local", "gpu": "cpu", "count": 1}, recipe={"train": train})
    handle = backend.start(launch)

    def ended():
        st = backend.status("r-pin", 0, 0, handle)
        return None if st.running else st
    status = wait_for(ended, 150, "the island to exit")
    assert status.exit_code == 2
    assert status.detail.startswith("rank 0 exited with status 2: " + REFUSAL.format(base.resolve())), status.detail
