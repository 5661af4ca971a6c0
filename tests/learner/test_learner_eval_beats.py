"""A real learner process beats while it evaluates: LearnerBeat events, one per report interval at most, reach the tape
as its held-out batches advance, during the evaluations it runs while training and during its final evaluation after
max_steps, so the launcher does not take a long final evaluation for a frozen island (services/launcher/liveness.py).

The learner is the torch backend with each held-out batch slowed by a fixed delay (tests/learner/learner_slow_eval.py),
synced over a fresh nats-server whose events a real tape writer lands."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import learner_tiny
from yeto.infra.stack import StackPaths
from yeto.infra.tape.sql import query_file
from yeto.learners.bus_client import NatsTransport

pytestmark = [pytest.mark.own_nats_server, pytest.mark.slow]
# Two evaluations, one while training (step 4) and the final one (step 6), of ~15 held-out batches (0.3 of 200 rows)
# slowed 0.4 s each: ~6 s each, three beat intervals. (EVAL_EVERY 3 evaluated at step 6 as well, 6 s for nothing new.)
RUN, STEPS, EVAL_EVERY, DELAY_S, HELDOUT_FRACTION = "r-beats", 6, 4, 0.4, 0.3
EVERY_S = 2.0       # NatsTransport's progress_every_s: the beats' interval at most


def events(state: Path) -> list[dict]:
    rows = query_file(StackPaths(state).db, "SELECT payload FROM events WHERE type IN ('LearnerProgress', 'LearnerBeat') "
                                            "ORDER BY seq")["rows"]
    return [json.loads(payload) for (payload,) in rows]


@pytest.mark.timeout(400)
def test_a_learner_beats_as_its_held_out_batches_advance_and_through_its_final_evaluation(tmp_path, nats_server):
    assert NatsTransport.__init__.__kwdefaults__["progress_every_s"] == EVERY_S
    state = tmp_path / "state"
    state.mkdir()
    recipe = {"model": str(learner_tiny.write_model_dir(tmp_path / "model")), "seq_len": 32, "micro_batch": 2,
              "data": str(learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=200)), "max_steps": STEPS,
              "eval_every": EVAL_EVERY, "heldout_fraction": HELDOUT_FRACTION, "lr": 3e-3, "tuning": "lora", "lora_r": 4}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    with open(tmp_path / "tape.log", "ab") as log:
        writer = subprocess.Popen([sys.executable, "-m", "yeto.infra.tape", "--nats-url", nats_server.url, "--db",
                                   str(StackPaths(state).db)], stdout=log, stderr=subprocess.STDOUT)
        try:
            done = subprocess.run([sys.executable, str(Path(__file__).parent / "learner_slow_eval.py"), str(DELAY_S),
                                   "--run-id", RUN, "--learner", "island-0", "--nats-url", nats_server.url, "--device",
                                   "cpu", "--recipe", str(tmp_path / "recipe.json"), "--log-format", "json"],
                                  capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        finally:
            writer.send_signal(signal.SIGTERM)      # a stopping writer lands what the stream holds, then exits
            writer.wait(timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (finished,) = [line for line in lines if line.get("event") == "done"]
    (sync,) = [line for line in lines if line.get("event") == "sync"]
    assert sync["bytes_sent"] > 0       # its pushes, the final ones among them, went out

    tape = events(state)
    beats = [e for e in tape if e["type"] == "LearnerBeat"]
    final = [b for b in beats if b["final"]]
    total = final[0]["batches"] if final else 0
    # the final evaluation lasts at least total x DELAY_S: it beats at least once per EVERY_S of it
    assert total * DELAY_S >= 2 * EVERY_S, f"the held-out set is too small to test beats: {total} batches"
    assert len(final) >= 2, beats
    assert all(b["step"] == STEPS and b["batches"] == total and b["generation"] == 0 for b in final), final
    done_counts = [b["batches_done"] for b in final]
    assert done_counts == sorted(set(done_counts)) and 1 <= done_counts[0] and done_counts[-1] <= total, done_counts
    # every step was reported before the final evaluation began: its beats follow the last LearnerProgress
    last_progress = max(i for i, e in enumerate(tape) if e["type"] == "LearnerProgress")
    assert tape[last_progress]["step"] == STEPS and tape.index(final[0]) > last_progress
    # the evaluations while training beat too, at the steps they evaluated
    assert {b["step"] for b in beats if not b["final"]} <= {EVAL_EVERY, STEPS}
    assert any(not b["final"] for b in beats), beats
    assert len({b["id"] for b in beats}) == len(beats)
    assert finished["heldout"] > 0 and finished["steps"] == STEPS
