"""Every optimizer step of a real learner process reaches the tape and the trackers: a 20-step run against a real
nats-server and tape writer leaves steps 1..20 in order, each with its loss, lr, throughput and gradient norm, batched
into few LearnerProgress events; a LearnerStarted event says how the island ran; `yeto report --to tensorboard` then
holds a point for every step."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny
from yeto.cli.main import main
from yeto.infra.stack import StackPaths
from yeto.infra.tape.sql import query_file

pytestmark = pytest.mark.own_nats_server      # the tape writer lands the stream from its first event: this run's alone
RUN = "r-metrics"
NUM_STEPS = 20


@pytest.fixture(scope="module")
def trained(tmp_path_factory, nats_server):
    """A 20-step LoRA learner process synced over a fresh nats-server, its events landed by a tape writer whose file is
    a state directory's tape (the stack down once it is done): (state directory, the learner's stdout lines)."""
    nats = nats_server
    root = tmp_path_factory.mktemp("metrics")
    state = root / "state"
    state.mkdir()
    recipe = {"model": str(learner_tiny.write_model_dir(root / "model")), "seq_len": 32, "micro_batch": 2,
              "data": str(learner_tiny.write_chat_jsonl(root / "chat.jsonl", num_rows=80)), "max_steps": NUM_STEPS,
              "lr": 3e-3, "warmup_steps": 4, "tuning": "lora", "lora_r": 4, "clip_norm": 1.0}
    (root / "recipe.json").write_text(json.dumps(recipe))
    with open(root / "tape.log", "ab") as log:
        writer = subprocess.Popen([sys.executable, "-m", "yeto.infra.tape", "--nats-url", nats.url, "--db",
                                   str(StackPaths(state).db)], stdout=log, stderr=subprocess.STDOUT)
        try:
            done = subprocess.run([sys.executable, "-m", "yeto.learners.torch", "--run-id", RUN, "--learner", "island-0",
                                   "--nats-url", nats.url, "--device", "cpu", "--recipe", str(root / "recipe.json"),
                                   "--log-format", "json"], capture_output=True, text=True, timeout=300,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
        finally:
            writer.send_signal(signal.SIGTERM)      # a stopping writer lands what the stream holds, then exits
            writer.wait(timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return state, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def tape_events(state: Path, type_: str) -> list[dict]:
    rows = query_file(StackPaths(state).db, f"SELECT payload FROM events WHERE type = '{type_}' ORDER BY seq")["rows"]
    return [json.loads(payload) for (payload,) in rows]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_step_of_a_real_learner_is_on_the_tape_in_order_with_lr_and_throughput(trained):
    state, _ = trained
    reports = tape_events(state, "LearnerProgress")
    steps = [s for report in reports for s in report["steps"]]
    assert [s["step"] for s in steps] == list(range(1, NUM_STEPS + 1))
    assert len(reports) < NUM_STEPS                        # batched: fewer events than steps
    assert all(s["lr"] > 0 and s["tokens_per_s"] > 0 and s["tokens"] > 0 and s["step_time_s"] > 0 for s in steps)
    assert all(s["grad_norm"] is not None and s["grad_norm"] > 0 for s in steps)
    assert steps[0]["lr"] < steps[3]["lr"]                 # the warm-up, step by step
    assert [r["step"] for r in reports] == [r["steps"][-1]["step"] for r in reports]
    rows = query_file(StackPaths(state).db, "SELECT step, loss, lr, tokens_per_s, grad_norm FROM learner_steps "
                                            f"WHERE run_id = '{RUN}' AND learner = 'island-0' ORDER BY step")["rows"]
    assert rows == [[s["step"], s["loss"], s["lr"], s["tokens_per_s"], s["grad_norm"]] for s in steps]   # `yeto sql`'s view


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_learner_says_how_it_runs_on_its_first_line_and_on_the_tape(trained):
    state, lines = trained
    (started,) = tape_events(state, "LearnerStarted")
    how = {k: started[k] for k in ("backend", "ranks", "shard", "tuning", "dtype", "quantization", "device")}
    assert how == {"backend": "torch", "ranks": 1, "shard": "single", "tuning": "lora", "dtype": "float32",
                   "quantization": "none", "device": "cpu"}
    assert 0 < started["trainable"] < started["parameters"]
    assert lines[0]["event"] == "start" and {k: lines[0][k] for k in how} == how
    assert (lines[0]["trainable"], lines[0]["parameters"]) == (started["trainable"], started["parameters"])


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="pip install tensorboard (the trackers extra)")
def test_tensorboard_from_the_real_run_has_a_scalar_for_every_step(trained, tmp_path, monkeypatch, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    state, _ = trained
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    assert main(["--state-dir", str(state), "report", RUN, "--to", "tensorboard", "--report-dir", str(tmp_path)]) == 0
    acc = EventAccumulator(str(tmp_path / "tensorboard" / RUN))
    acc.Reload()
    for tag in ("loss", "lr", "tokens_per_s", "step_time_s", "grad_norm"):
        assert [s.step for s in acc.Scalars(f"train/{tag}/island-0")] == list(range(1, NUM_STEPS + 1)), tag


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_fsdp2_island_says_fsdp_on_its_first_line_and_measures_the_sharded_gradient_norm(tmp_path):
    """Two real ranks of one island (gloo on CPU) under `shard: fsdp`: rank 0's first line, the one `yeto logs` shows,
    names FSDP2, and the gradient norm over the shards is a number on every step."""
    from test_learner_ddp import _free_port

    recipe = {"model": str(learner_tiny.write_model_dir(tmp_path / "model")), "seq_len": 32, "micro_batch": 2,
              "data": str(learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=40)), "max_steps": 3,
              "tuning": "lora", "lora_r": 2, "shard": "fsdp"}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    port = _free_port()
    ranks = [subprocess.Popen([sys.executable, "-m", "yeto.learners.torch", "--run-id", RUN, "--learner", "island-0",
                               "--no-sync", "--device", "cpu", "--recipe", str(tmp_path / "recipe.json"), "--rank", str(r),
                               "--world-size", "2", "--master-port", str(port), "--log-every-s", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for r in range(2)]
    outs = [rank.communicate(timeout=240) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outs[0][1][-3000:] + outs[1][1][-3000:]
    lines = outs[0][0].splitlines()
    assert lines[0].startswith("start: torch on cpu, 2 ranks sharded with FSDP2, lora tuning"), lines[0]
    steps = [line.split("  ") for line in lines if line.startswith("step ")]
    assert [s[0] for s in steps] == ["step 1", "step 2", "step 3"]
    assert all(float(next(f for f in s if f.startswith("grad_norm ")).split()[1]) > 0 for s in steps), steps
    assert outs[1][0] == ""                  # rank 1 prints nothing: the island speaks once


def test_the_steps_view_counts_a_report_without_steps_as_its_one_step(tmp_path):
    """A LearnerProgress v2 (before reports carried their steps) is one row of `learner_steps`, not none."""
    from yeto.infra.tape.store import TapeStore

    v2 = {"type": "LearnerProgress", "version": 2, "id": "p-old", "run_id": "r-old", "ts": "2026-11-30T17:47:02Z",
          "source": "island-0", "learner": "island-0", "generation": 0, "step": 7, "loss": 2.0, "tokens": 70,
          "tokens_per_s": 5.0, "step_time_s": 1.0, "lr": 1e-4, "eval_loss": None}
    store = TapeStore(StackPaths(tmp_path).db)
    store.append([1], ["r-old"], [json.dumps(v2)])
    store.close()
    rows = query_file(StackPaths(tmp_path).db, "SELECT learner, step, loss, lr, grad_norm FROM learner_steps")["rows"]
    assert rows == [["island-0", 7, 2.0, 1e-4, None]]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_yeto_plot_of_the_real_run_draws_every_step(trained, tmp_path, monkeypatch, capsys):
    from yeto.cli.plot import Collect
    from yeto.cli.tape import load_run
    from yeto.cli.trackers import replay

    state, _ = trained
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    sink = Collect()
    replay(load_run, Namespace(state_dir=str(state), nats_url=None), RUN, [sink])
    assert [step for step, _ in sink.series["train/loss/island-0"]] == list(range(1, NUM_STEPS + 1))  # what plot draws
    png = tmp_path / "loss.png"
    assert main(["--state-dir", str(state), "plot", RUN, "--out", str(png)]) == 0
    assert capsys.readouterr().out.strip() == f"{png}: 1 curve(s) of {RUN}" and png.stat().st_size > 1000
