"""A rank the zygote forked finds the codec kernels in numba's cache (the zygote's warm-up child filled it) and loads
them after its first optimizer step (kernels_warm.defer), not beside its model and data loads; any other learner
starts the warm-up before its model loads. Checked on the shell's real lifecycle with a backend that records when
the warm-up thread began (a stand-in behind the Backend protocol; the warm-up itself replaced by a no-op)."""
from __future__ import annotations

import json
import threading

import pytest

from yeto.learners import kernels_warm, shell
from yeto.learners.step import StepResult
from yeto.schemas.learner_contract import BACKENDS, LearnerArgs


class WhenWarm(shell.OneRank):
    info = BACKENDS["torch"]
    devices = None

    def __init__(self) -> None:
        self.seen: dict[str, bool] = {}

    def started(self) -> bool:
        return kernels_warm._STATE["thread"] is not None

    def load_recipe(self, text):
        from yeto.learners.lm_recipe import TrainRecipe
        return TrainRecipe.from_json(text)

    def build(self, recipe, args):
        self.seen["build"] = self.started()
        return "built"

    def describe(self, built, recipe):
        return {}

    def train_batches(self, built, recipe, args):
        self.seen["data"] = self.started()
        return iter(range(100))

    def heldout(self, built, recipe):
        return []

    def train(self, built, batches, recipe, *, sync, on_step, start_step):
        self.seen["first step"] = self.started()
        result = StepResult(step=1, loss=2.0, tokens=next(batches), seconds=0.1, lr=1e-3, synced=False)
        on_step(result)
        self.seen["after the first step"] = self.started()
        return [result]

    def evaluate(self, built, heldout):
        return 1.0

    def close(self, built):
        pass


class Hook:
    def progress(self, result) -> None:
        pass

    def close(self) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return {}


@pytest.mark.parametrize("forked", [False, True])
def test_a_forked_rank_warms_its_kernels_after_the_first_step_any_other_before_its_model(forked, monkeypatch):
    monkeypatch.setitem(kernels_warm._STATE, "thread", None)
    monkeypatch.setattr(kernels_warm, "_AFTER_FIRST_STEP", threading.Event())
    monkeypatch.setattr(kernels_warm, "_run", lambda: None)
    monkeypatch.setattr(shell, "connect", lambda b, built, recipe, args, how: Hook())
    if forked:
        kernels_warm.defer()          # what the zygote's child does before the learner runs
    backend = WhenWarm()
    args = LearnerArgs(run_id="r", learner="l0", recipe=json.dumps({"model": "m", "data": "d", "max_steps": 1}),
                       nats_url="nats://127.0.0.1:1", log_format="json")
    shell.run(backend, args)
    before = not forked
    assert backend.seen == {"build": before, "data": before, "first step": before, "after the first step": True}
