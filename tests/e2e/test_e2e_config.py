"""A newcomer's axolotl-style config file launches a real local run: two islands, the file's recipe on the tape,
held-out eval losses every `eval_steps` on LearnerProgress, finalized."""
from __future__ import annotations

import pytest

from e2e_stack import Stack

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(300)
def test_an_axolotl_config_file_runs_two_local_islands_with_eval_on_the_tape(tmp_path, material):
    s = Stack(tmp_path / "home", material["model"], material["data"])
    config = tmp_path / "lora.yml"
    config.write_text(f"""base_model: {material['model']}
datasets:
  - path: {material['data']}
    type: chat_template
val_set_size: 0.1
sequence_len: 128
sample_packing: true
adapter: lora
lora_r: 8
lora_alpha: 16
lora_dropout: 0.0
lora_target_linear: true
gradient_accumulation_steps: 1
micro_batch_size: 2
max_steps: 20
optimizer: adamw_torch
lr_scheduler: linear
learning_rate: 0.003
warmup_steps: 2
eval_steps: 5
weight_decay: 0.0
sync_every: 8
fragments: 2
""")
    try:
        done = s.yeto("launch", "-c", str(config), "--gpu", "local:1xcpu,local:1xcpu", "--run-id", "cfg", "--wait",
                      timeout=280)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"config {config} (flags override it)" in done.stdout and "sample_packing: ignored" in done.stdout
        (launch,) = s.events("cfg", "RunLaunched")     # the LaunchRun recipe, as the launcher took it
        train, settings = launch["recipe"]["train"], launch["recipe"]["config"]
        assert (train["lora_r"], train["lora_alpha"], train["schedule"], train["eval_every"]) == (8, 16, "linear", 5)
        assert (train["heldout_fraction"], train["weight_decay"], settings["config"]) == (0.1, 0.0, str(config))
        evals = [(e["learner"], e["step"]) for e in s.events("cfg", "LearnerProgress") if e.get("eval_loss") is not None]
        for learner in ("island-0", "island-1"):       # every evaluated step reaches the tape, rate limit or not
            assert [step for who, step in evals if who == learner] == [5, 10, 15, 20], evals
        assert [e["reason"] for e in s.events("cfg", "RunFinalized")] == ["max_steps"]
    finally:
        s.down()
