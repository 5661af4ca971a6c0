"""The learner's lines: readable by default with no library noise on stderr, JSON for machines (flag or environment)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny
from yeto.learners.console import log_format, render, text_line


def test_step_and_done_read_as_sentences_and_json_stays_one_object():
    step = {"event": "step", "step": 3, "loss": 3.36072, "tokens": 104, "seconds": 0.0646, "lr": 4.5e-05,
            "synced": True, "heldout": 3.37595}
    assert text_line(step) == "step 3  loss 3.3607  tokens 104  lr 4.500e-05  0.0646 s synced  heldout 3.3760"
    assert text_line({"event": "done", "steps": 6, "tokens": 624, "seconds": 0.64, "heldout": 3.3655}) == \
        "done: steps 6  tokens 624  seconds 0.6400  heldout 3.3655"
    assert json.loads(render(step, "json")) == step


def test_the_format_comes_from_the_flag_then_the_environment(monkeypatch):
    monkeypatch.delenv("YETO_LOG_FORMAT", raising=False)
    assert log_format() == "text" and log_format("json") == "json"
    monkeypatch.setenv("YETO_LOG_FORMAT", "JSON")
    assert log_format() == "json" and log_format("text") == "text"
    monkeypatch.setenv("YETO_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="choose from text, json"):
        log_format()


@pytest.mark.timeout(180)
def test_a_real_learner_prints_text_lines_and_no_library_noise(tmp_path):
    model = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=60)
    recipe = {"model": str(model), "data": str(data), "seq_len": 32, "micro_batch": 2, "max_steps": 3, "tuning": "lora",
              "lora_r": 2, "heldout_fraction": 0.1}
    env = {k: v for k, v in os.environ.items() if k != "YETO_LOG_FORMAT"}
    done = subprocess.run([sys.executable, "-m", "yeto.learners.torch", "--run-id", "r1", "--learner", "l0", "--no-sync",
                           "--eval-every", "3", "--recipe", json.dumps(recipe)], capture_output=True, text=True,
                          timeout=150, env={**env, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("start: backend torch  ranks 1  shard none  tuning lora  dtype float32")
    assert lines[1].startswith("step 1  loss ") and lines[-1].startswith("done: steps 3  tokens ")
    assert not any(line.startswith("{") for line in lines)
    assert "Warning" not in done.stderr and "Loading weights" not in done.stderr, done.stderr
