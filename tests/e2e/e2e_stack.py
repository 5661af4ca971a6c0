"""What the end-to-end tests share: `yeto` in real subprocesses against a real local stack, the tape polled
through the same path `yeto sql` takes, real SIGKILLs of recorded pids, and held-out loss of an artifact."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

from yeto.infra import stack

YETO = str(Path(sys.executable).parent / "yeto")
# Small and fast to sync: two fragments, a fragment pushed every 4 steps, a learning rate the counting task
# answers quickly. Tiny steps take ~30 ms, so step counts are in the hundreds: the learners' start-up jitter
# (seconds) must not be the whole run.
TRAIN_FLAGS = ("--seq-len", "128", "--sync-every", "8", "--fragments", "2", "--lr", "3e-3", "--warmup-steps", "2")


class Stack:
    """One YETO_HOME: launches, tape queries, and failure injection on the processes its stack.json records."""

    def __init__(self, home: Path, model: Path, data: Path):
        self.home, self.model, self.data = Path(home), Path(model), Path(data)
        self.env = {**os.environ, "YETO_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        self.runs: dict[str, tuple[subprocess.Popen, Path]] = {}

    # -- the CLI ----------------------------------------------------------------------------------------
    def yeto(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([YETO, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def launch(self, run_id: str, *flags: str, islands: str = "local:1xcpu,local:1xcpu") -> subprocess.Popen:
        """`yeto launch ... --wait` in the background; its output goes to <home>/<run_id>.out."""
        out = self.home.parent / f"{run_id}.out"
        argv = [YETO, "launch", "--gpu", islands, "--model", str(self.model), "--data", str(self.data),
                *TRAIN_FLAGS, *flags, "--run-id", run_id, "--wait"]
        proc = subprocess.Popen(argv, env=self.env, stdout=open(out, "w"), stderr=subprocess.STDOUT)
        self.runs[run_id] = (proc, out)
        return proc

    def finish(self, run_id: str, timeout: float) -> str:
        """Wait for `yeto launch --wait` to exit 0; returns what it printed."""
        proc, out = self.runs[run_id]
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"{run_id} not finalized within {timeout:.0f}s:\n{self.story(run_id)}") from None
        text = out.read_text()
        assert code == 0, f"yeto launch --wait exited {code}:\n{text}\n{self.story(run_id)}"
        return text

    # -- the tape ---------------------------------------------------------------------------------------
    def sql(self, query: str) -> list[dict]:
        """Rows as dicts: asked of the running tape writer, or read from the file when the stack is down."""
        from yeto.cli.sql import tape_query

        result = tape_query(Namespace(state_dir=str(self.home), nats_url=None), query)
        return [dict(zip(result["columns"], row)) for row in result["rows"]]

    def events(self, run_id: str, *types: str, after_seq: int = 0) -> list[dict]:
        """The run's events of these types after `after_seq`, payload parsed, in stream order."""
        kinds = ",".join(f"'{t}'" for t in types)
        rows = self.sql(f"select seq, ts, type, payload from events where run_id = '{run_id}' and type in ({kinds}) "
                        f"and seq > {after_seq} order by seq")
        return [{**json.loads(r["payload"]), "seq": r["seq"], "ts": r["ts"]} for r in rows]

    def wait_for(self, run_id: str, what: str, found, *types: str, timeout: float = 120, after_seq: int = 0) -> list[dict]:
        """Poll the tape until `found(events)` holds for the run's events of `types`; returns those events."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                evs = self.events(run_id, *types, after_seq=after_seq)
            except ValueError:          # the tape writer is restarting or the server is away: ask again
                evs = []
            if found(evs):
                return evs
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:.0f}s for {what}:\n{self.story(run_id)}")
            time.sleep(0.5)

    def story(self, run_id: str) -> str:
        """The launch output and the run's last events, for failure messages."""
        text = self.runs[run_id][1].read_text()[-3000:] if run_id in self.runs else ""
        try:
            rows = self.sql(f"select seq, type, source, left(payload::varchar, 160) p from events "
                            f"where run_id = '{run_id}' and type != 'LearnerProgress' order by seq desc limit 30")
            text += "\n" + "\n".join(f"{r['seq']} {r['type']} {r['source']} {r['p']}" for r in reversed(rows))
        except Exception as e:  # noqa: BLE001 - a failure message must not fail
            text += f"\n(tape not readable: {e})"
        return text

    # -- failure injection ------------------------------------------------------------------------------
    def pid(self, component: str) -> int:
        return stack.read_record(stack.StackPaths(self.home))["pids"][component]

    def kill9(self, component: str) -> int:
        """SIGKILL one process of the stack (as recorded in stack.json); returns once it is gone."""
        pid = self.pid(component)
        os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            if not stack.alive(pid):
                return pid
            time.sleep(0.05)
        raise AssertionError(f"{component} (pid {pid}) survived SIGKILL")

    def up(self) -> dict:
        """What an operator runs after a crash: `stack.up` restarts whatever died."""
        return stack.up(self.home)

    def down(self) -> None:
        for proc, _ in self.runs.values():
            if proc.poll() is None:
                proc.kill()
        stack.down(self.home)


def round_versions(merged: list[dict]) -> dict[int, list[int]]:
    """fragment -> the global versions of its RoundMerged events, in stream order."""
    out: dict[int, list[int]] = {}
    for e in merged:
        out.setdefault(e["fragment"], []).append(e["global_version"])
    return out


def heldout_loss(model_dir: Path, artifact: Path | None, rows: list[dict]) -> float:
    """Mean next-token loss over whole held-out conversations: of the base model, or of the artifact on it
    (a peft adapter loaded with PeftModel.from_pretrained, or a full model directory)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    if artifact is None:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    elif json.loads((artifact / "manifest.json").read_text())["kind"] == "adapter":
        from peft import PeftModel
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), artifact)
    else:
        model = AutoModelForCausalLM.from_pretrained(artifact)
    model.eval()
    total = count = 0.0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([tok.apply_chat_template(row["messages"], tokenize=True, return_dict=False)])
            n = ids.shape[1] - 1
            total += model(input_ids=ids, labels=ids).loss.item() * n
            count += n
    return total / count
