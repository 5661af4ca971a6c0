"""One backbone for every learner backend: a new backend is one folder and one registry line, the lifecycle runs in
one order for all (the final pushes before the final evaluation), and the contract's flags round-trip."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import yeto.learners
from yeto.cli.join import learner_argv
from yeto.learners import shell
from yeto.learners.step import StepResult
from yeto.schemas import learner_contract
from yeto.schemas.learner_contract import BACKENDS, BackendInfo, LearnerArgs, backend, backend_for
from yeto.services.launcher.api import JoinToken

pytestmark = pytest.mark.timeout(120)

# The whole of a throwaway backend that only counts steps: its folder's one file.
COUNTER = textwrap.dedent('''
    """A backend that only counts steps (written and deleted by tests/learner/test_learner_backbone.py)."""
    import json
    import sys

    from yeto.learners import shell
    from yeto.learners.step import StepResult
    from yeto.schemas.learner_contract import BackendInfo, LearnerArgs


    class Recipe:
        def __init__(self, text):
            self.__dict__.update({"start_step": 0, "grad_accum": 1, "eval_every": 0, "sync": {}, **json.loads(text)})


    class Counter(shell.OneRank):
        info = BackendInfo(__package__.rsplit(".", 1)[-1], "lm", "counts steps")
        devices = None

        def load_recipe(self, text):
            return Recipe(text)

        def build(self, recipe, args):
            return {"steps": 0}

        def describe(self, built, recipe):
            return {"ranks": 1, "trainable": 0}

        def train_batches(self, built, recipe, args):
            return iter(range(args.learner_index, 10**9, args.num_learners))

        def heldout(self, built, recipe):
            return [0]

        def train(self, built, batches, recipe, *, sync, on_step, start_step):
            results = []
            for step, batch in zip(range(start_step + 1, recipe.max_steps + 1), batches):
                built["steps"] = step
                results.append(StepResult(step=step, loss=1.0 / step, tokens=batch, seconds=0.0, lr=0.0, synced=False))
                on_step(results[-1])
            return results

        def evaluate(self, built, heldout):
            return 1.0 / max(1, built["steps"])


    if __name__ == "__main__":
        sys.exit(shell.main(Counter()))
''')


@pytest.fixture
def counter_backend(monkeypatch):
    """learners/<name>/__main__.py written into the installed package, and its one registry line; both gone after."""
    name = f"counter{os.getpid()}"
    folder = Path(yeto.learners.__file__).parent / name
    folder.mkdir()
    try:
        (folder / "__main__.py").write_text(COUNTER)
        monkeypatch.setitem(BACKENDS, name, BackendInfo(name, "lm", "counts steps"))      # the registry line
        yield name
    finally:
        shutil.rmtree(folder)


def test_a_backend_that_only_counts_steps_is_one_folder_and_one_registry_line(counter_backend, tmp_path):
    token = JoinToken(url="nats://127.0.0.1:1", credential={}, run_id="r1", learner="island-1", slot=1, generation=0,
                      num_islands=2, start_step=3, recipe={}, ca="")
    (tmp_path / "recipe.json").write_text(json.dumps({"max_steps": 7}))
    argv = learner_argv(token, counter_backend, tmp_path / "recipe.json", None, token.url)   # `yeto join`'s command
    assert argv[1:3] == ["-m", f"yeto.learners.{counter_backend}"]
    done = subprocess.run([*argv, "--no-sync", "--eval-every", "2", "--log-every-s", "0", "--log-format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines[0] == {"event": "start", "backend": counter_backend, "ranks": 1, "trainable": 0,
                        "import_s": lines[0]["import_s"], "build_s": lines[0]["build_s"]}
    assert 0 < lines[0]["import_s"] < 60 and 0 <= lines[0]["build_s"] < 60    # start-up, for benchmarks/startup.py
    steps = [line for line in lines if line["event"] == "step"]
    assert [s["step"] for s in steps if s["heldout"] is not None] == [4, 6]   # resumed past step 3, every 2nd evaluated
    # Island 1 of 2 reads its own shard (1, 3, 5, ...), past the 3 micro-batches its predecessor trained on.
    assert [s["tokens"] for s in steps] == [7, 9, 11, 13]
    assert lines[-1] == {"event": "done", "steps": 4, "tokens": 7 + 9 + 11 + 13, "seconds": lines[-1]["seconds"],
                         "heldout": pytest.approx(1 / 7), "connect_s": lines[-1]["connect_s"],
                         "data_s": lines[-1]["data_s"]}
    assert lines[-1]["connect_s"] < 0.5 and 0 <= lines[-1]["data_s"] < 60     # --no-sync: nothing to connect
    bad = subprocess.run([*argv, "--no-sync", "--world-size", "2"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and f"a {counter_backend} island runs 1 rank(s), not 2" in bad.stderr


class Recording(shell.OneRank):
    """A backend that records what the shell asks of it, with a sync hook that records its calls."""

    info = BACKENDS["torch"]
    devices = None

    def __init__(self) -> None:
        self.calls: list[str] = []

    def load_recipe(self, text):
        from yeto.learners.lm_recipe import TrainRecipe
        return TrainRecipe.from_json(text)

    def build(self, recipe, args):
        self.calls.append("build")
        return "built"

    def describe(self, built, recipe):
        return {"tuning": recipe.tuning}

    def on_rank0(self, built, call):
        self.calls.append("on_rank0")
        return super().on_rank0(built, call)

    def train_batches(self, built, recipe, args):
        self.calls.append("train_batches")
        return iter(range(100))

    def heldout(self, built, recipe):
        return ["held"]

    def train(self, built, batches, recipe, *, sync, on_step, start_step):
        self.calls.append("train")
        result = StepResult(step=1, loss=2.0, tokens=next(batches), seconds=0.1, lr=1e-3, synced=False)
        on_step(result)
        return [result]

    def evaluate(self, built, heldout):
        self.calls.append("evaluate")
        for _ in heldout:       # as every backend does: the shell's list beats per batch
            pass
        return 1.5

    def close(self, built):
        self.calls.append("close")


class RecordingHook:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def progress(self, result) -> None:
        self.calls.append(f"progress {result.step} eval {result.eval_loss}")

    def end_training(self) -> None:
        self.calls.append("final pushes")

    def beat(self, step: int, done: int, total: int, *, final: bool) -> None:
        self.calls.append(f"beat {step} {done}/{total}{' final' if final else ''}")

    def close(self) -> None:
        self.calls.append("transport closed")

    def stats(self) -> dict[str, int]:
        return {"bytes_sent": 1}


def test_every_backend_pushes_its_last_deltas_before_the_final_evaluation(monkeypatch, capsys):
    """The lifecycle is written once: the drift where MLX and diffusion evaluated before their final pushes is gone.
    Every evaluation beats per held-out batch, the final one before the transport closes."""
    backend = Recording()
    monkeypatch.setattr(shell, "connect", lambda b, built, recipe, args, how: RecordingHook(b.calls))
    args = LearnerArgs(run_id="r", learner="l0", recipe=json.dumps({"model": "m", "data": "d", "max_steps": 1}),
                       nats_url="nats://127.0.0.1:1", eval_every=1, log_format="json")
    assert shell.run(backend, args) == 1.5
    assert backend.calls == ["build", "on_rank0", "train_batches", "train", "evaluate", "beat 1 1/1",
                             "progress 1 eval 1.5", "on_rank0", "final pushes", "evaluate", "beat 1 1/1 final",
                             "on_rank0", "transport closed", "close"]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["event"] for line in lines] == ["start", "step", "done", "sync"]
    assert lines[0] == {"event": "start", "backend": "torch", "tuning": "lora", "import_s": lines[0]["import_s"],
                        "build_s": lines[0]["build_s"]}


def test_the_contract_round_trips_through_its_flags_and_names_what_is_wrong():
    args = LearnerArgs(run_id="r", learner="island-2", recipe="/r.json", generation=3, nats_url="nats://h:4222",
                       learner_index=2, num_learners=4, start_step=40, rank=1, world_size=2, device="cpu", no_sync=True,
                       log_every_s=0.5, log_format="json")
    assert LearnerArgs.parse(args.to_argv(), prog="t") == args
    assert LearnerArgs(run_id="r", learner="l", recipe="x").to_argv() == ["--run-id", "r", "--learner", "l",
                                                                          "--recipe", "x"]
    with pytest.raises(SystemExit):
        LearnerArgs.parse([*args.to_argv(), "--device", "tpu"], prog="t", devices=("cpu", "cuda"))
    with pytest.raises(ValueError, match="unknown learner backend 'jax': choose from torch, mlx, diffusion"):
        backend("jax")
    assert backend_for("diffusion").module == "yeto.learners.diffusion" and backend_for("lm").name == "torch"


def test_every_registered_backend_is_a_runnable_module_on_the_shell():
    """Each registry line names a folder whose `python -m` takes the contract: --help lists the contract's flags."""
    for info in learner_contract.BACKENDS.values():
        done = subprocess.run([sys.executable, "-m", info.module, "--help"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (info.name, done.stderr[-2000:])
        assert all(LearnerArgs.flag(f) in done.stdout for f in ("run_id", "start_step", "no_sync", "log_format"))
