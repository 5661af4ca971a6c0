"""The learner entry point trains a tiny model from a chat JSONL with --no-sync (no NATS) and reports
progress and the held-out loss as JSON lines; bad recipes are refused with exit status 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny


def _learner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yeto.learners.torch", "--run-id", "r1", "--learner", "l0", *args],
                          capture_output=True, text=True, timeout=150, env={"OMP_NUM_THREADS": "1", **_env()})


def _env() -> dict:
    import os
    return {**os.environ, "YETO_LOG_FORMAT": "json"}     # the machine format (console.py); people get text lines


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_sync_learner_trains_from_chat_jsonl_and_lowers_heldout_loss(tmp_path):
    model_dir = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=300)
    recipe = {"model": str(model_dir), "data": str(data), "seq_len": 64, "micro_batch": 4, "max_steps": 40,
              "lr": 3e-3, "warmup_steps": 5, "heldout_fraction": 0.1, "tuning": "full"}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    done = _learner("--no-sync", "--eval-every", "1", "--recipe", str(tmp_path / "recipe.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines[0]["event"] == "start" and {k: lines[0][k] for k in ("backend", "ranks", "shard", "tuning", "dtype",
                                                                      "quantization", "device")} == {
        "backend": "torch", "ranks": 1, "shard": "single", "tuning": "full", "dtype": "float32", "quantization": "none",
        "device": "cpu"}
    assert lines[0]["trainable"] == lines[0]["parameters"] > 0        # full tuning trains every weight
    steps = [line for line in lines if line["event"] == "step"]
    assert [s["step"] for s in steps] == list(range(1, 41))   # every step evaluated, so every step logged
    assert lines[-1]["event"] == "done" and lines[-1]["steps"] == 40
    assert lines[-1]["heldout"] < 0.8 * steps[0]["heldout"]
    assert not any(s["synced"] for s in steps)


def test_unknown_recipe_field_exits_2_with_the_field_named():
    done = _learner("--no-sync", "--recipe", '{"model": "x", "lora_rank": 4}')
    assert done.returncode == 2 and "lora_rank" in done.stderr


_PROBE = """import runpy, sys
sys.argv = ['yeto.learners.torch', *sys.argv[1:]]
try:
    runpy.run_module('yeto.learners.torch', run_name='__main__', alter_sys=True)
except SystemExit as e:
    code = e.code
print('PROBE', code, 'peft' in sys.modules, sys.modules.get('bitsandbytes', 'absent'))
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_lora_learner_process_without_nf4_trains_with_bitsandbytes_kept_out(tmp_path):
    """peft imports bitsandbytes whenever it is installed (~3 s of CPU per learner start): a learner process whose
    recipe does not quantize keeps it out and still trains LoRA through peft."""
    model_dir = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=60)
    recipe = {"model": str(model_dir), "data": str(data), "seq_len": 32, "micro_batch": 2, "max_steps": 3, "lr": 3e-3,
              "tuning": "lora", "lora_r": 4}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    done = subprocess.run([sys.executable, "-c", _PROBE, "--run-id", "r1", "--learner", "l0", "--no-sync",
                           "--recipe", str(tmp_path / "recipe.json")], capture_output=True, text=True, timeout=150,
                          env={"OMP_NUM_THREADS": "1", **_env()})
    probe = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert probe == ["PROBE 0 True None"], done.stdout[-2000:] + done.stderr[-3000:]
    assert json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])["steps"] == 3


def test_only_an_nf4_recipe_lets_a_learner_process_import_bitsandbytes(tmp_path):
    from yeto.learners.torch.__main__ import needs_bitsandbytes
    base = ["--run-id", "r", "--learner", "l", "--recipe"]
    assert not needs_bitsandbytes([*base, json.dumps({"model": "x", "data": "d"})])
    assert needs_bitsandbytes([*base, json.dumps({"model": "x", "data": "d", "base_quantization": "nf4"})])
    assert needs_bitsandbytes([*base, '{"model": "x", "lora_rank": 4}'])        # unparsable: main reports it
    assert needs_bitsandbytes(["--bogus"])
