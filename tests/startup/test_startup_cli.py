"""`yeto launch` checks a local model's data without importing torch or transformers (their import was most of the
CLI's start-up seconds, benchmarks/startup.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from yeto.learners.torch.tiny import write_chat_jsonl, write_model_dir

YETO = str(Path(sys.executable).parent / "yeto")


def test_a_local_launch_checks_its_data_without_torch_or_transformers(tmp_path):
    model, data, home = write_model_dir(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl"), tmp_path / "home"
    env = {**os.environ, "YETO_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-X", "importtime", YETO, "launch", "--gpu", "local:1xcpu,local:1xcpu", "--model", str(model),
            "--data", str(data), "--tuning", "full", "--max-steps", "4", "--seq-len", "64", "--dry-run"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dry run: nothing was started" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "yeto.learners.data.tokenizer_files" in imported and "tokenizers" in imported     # the check ran
    assert not imported & {"torch", "transformers"}
