"""Run under an offline HF_HOME that caches a tiny base under a Hub id: train-like adapter, artifact, then load it back
with AutoPeftModelForCausalLM by the Hub id its adapter_config names; prints what the test checks as JSON."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.model import load_model, resolve
from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
from yeto.services.finalizer.artifact import write_artifact

RUN = {"fleet": [{"island": 0, "cloud": "local", "gpu": "cpu", "count": 1, "generations": 1}], "rounds_merged": 5,
       "learner_steps": {"island-0": 20}, "learner_losses": {"island-0": 1.2345},
       "learner_eval_losses": {"island-0": 1.5}}
DATA_CHECK = {"source": "yeto-test/chat@main", "revision": "c" * 40, "fingerprint": "ab" * 32, "num_rows": 90, "num_bad": 0}


def main(hub_id: str, commit: str, out: Path) -> None:
    torch.set_num_threads(2)
    recipe = TrainRecipe(model=hub_id, tuning="lora", lora_r=4, lora_alpha=8, seed=1)
    model = apply_tuning(load_model(resolve(hub_id)), recipe).eval()
    with torch.no_grad():
        for _, p in trainable_parameters(model):
            p.add_(0.05)                       # stand-in for training: every adapter tensor moves
    state = {n: p.detach().numpy().copy() for n, p in trainable_parameters(model)}
    train = {**recipe.to_dict(), "data": "yeto-test/chat", "pins": {"base": {"id": hub_id, "revision": commit, "files": {}}}}
    write_artifact(state, recipe={"train": train, "data_check": DATA_CHECK}, out=out, run_id="r-hub", versions={0: 5},
                   acked=["island-0"], run=RUN)
    from peft import AutoPeftModelForCausalLM

    loaded = AutoPeftModelForCausalLM.from_pretrained(str(out / "artifact")).eval()     # the deployable folder
    ids = torch.tensor([[2, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        err = float((loaded(ids).logits - model(ids).logits).abs().max())
    print(json.dumps({"max_abs_error": err, "base_class": type(loaded.get_base_model()).__name__}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
