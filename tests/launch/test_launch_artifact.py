"""The artifact from a final f32 state: a peft adapter that peft loads, a sharded full model that transformers
loads, both computing what the trained model computes, with tokenizer, chat template and a manifest of hashes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_model_dir
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.model import load_model, load_tokenizer, resolve
from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
from yeto.services.finalizer.artifact import sha256_file, write_artifact
from yeto.services.finalizer.output import UploadError, deliver

pytestmark = pytest.mark.timeout(120)
torch.set_num_threads(2)
IDS = torch.tensor([[2, 5, 6, 7, 8, 9]])


def trained(model_dir: Path, tuning: str):
    recipe = TrainRecipe(model=str(model_dir), tuning=tuning, lora_r=4, seed=1)
    model = apply_tuning(load_model(resolve(str(model_dir))), recipe)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():                         # stand-in for training: every trainable tensor moves
        for _, p in trainable_parameters(model):
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    state = {n: p.detach().numpy().copy() for n, p in trainable_parameters(model)}
    return model.eval(), state, {"train": recipe.to_dict(), "data_check": {"fingerprint": "ab" * 32}}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("tiny-model"))


def test_lora_state_becomes_a_peft_adapter_that_computes_what_the_trained_model_does(model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, state, recipe = trained(model_dir, "lora")
    kind, files, manifest_sha = write_artifact(state, recipe=recipe, out=tmp_path / "a", run_id="r1", versions={0: 3},
                                               acked=["island-0"])
    assert kind == "adapter" and {"artifact/adapter_config.json", "artifact/adapter_model.safetensors",
                                  "manifest.json"} <= set(files)
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), tmp_path / "a" / "artifact").eval()
    with torch.no_grad():
        assert torch.allclose(loaded(IDS).logits, model(IDS).logits, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path / "a" / "artifact").chat_template
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["files"] == {f: sha256_file(tmp_path / "a" / f) for f in manifest["files"]}
    assert (manifest["versions"], manifest["acked_by"], manifest["data"]) == ({"0": 3}, ["island-0"], {"fingerprint": "ab" * 32})
    again = write_artifact(state, recipe=recipe, out=tmp_path / "b", run_id="r1", versions={0: 3}, acked=["island-0"])
    assert again[2] == manifest_sha                                 # deterministic: the same state, the same manifest


def test_full_state_becomes_sharded_safetensors_that_transformers_loads(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model, state, recipe = trained(model_dir, "full")
    kind, files, _ = write_artifact(state, recipe=recipe, out=tmp_path / "f", run_id="r1", versions={0: 1}, acked=[],
                                    max_shard_size="200KB")
    assert kind == "full" and "artifact/model.safetensors.index.json" in files
    assert sum(f.endswith(".safetensors") for f in files) > 1
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "f" / "artifact").eval()
    with torch.no_grad():
        assert torch.allclose(loaded(IDS).logits, model(IDS).logits, atol=1e-5)


def test_the_artifact_tokenizer_pads_as_the_learners_do_when_the_base_has_no_pad_token(tmp_path):
    from transformers import AutoTokenizer

    base = write_model_dir(tmp_path / "base")
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(base)
    _, state, recipe = trained(base, "lora")
    write_artifact(state, recipe=recipe, out=tmp_path / "a", run_id="r1", versions={0: 1}, acked=[])
    learners = load_tokenizer(resolve(str(base)))
    assert learners.pad_token == learners.eos_token is not None
    assert AutoTokenizer.from_pretrained(tmp_path / "a" / "artifact").pad_token == learners.pad_token


def test_output_is_copied_to_a_local_path_or_uploaded_to_a_store_and_verified(tmp_path):
    import fsspec

    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text('{"x": 1}')
    (art / "w.bin").write_bytes(b"\0" * 1000)
    assert deliver(art, "") == (str(art), False)
    assert deliver(art, str(tmp_path / "out")) == (str((tmp_path / "out").resolve()), False)
    assert (tmp_path / "out" / "w.bin").read_bytes() == b"\0" * 1000
    assert deliver(art, "memory://bucket/run1") == ("memory://bucket/run1", True)
    assert fsspec.filesystem("memory").cat_file("/bucket/run1/manifest.json") == b'{"x": 1}'
    with pytest.raises(ValueError, match="unknown store scheme"):
        deliver(art, "ftpx://host/x")
    assert issubclass(UploadError, RuntimeError)


WRITER = """
import json, sys
import numpy as np
from yeto.services.finalizer import writer
from yeto.services.finalizer.artifact import write_artifact
writer.keep_bitsandbytes_out()          # as the artifact writer process's start (writer.main) does
state = dict(np.load(sys.argv[2]))
kind, files, sha = write_artifact(state, recipe=json.loads(sys.argv[3]), out=__import__("pathlib").Path(sys.argv[4]),
                                  run_id="r1", versions={0: 3}, acked=["island-0"])
print(json.dumps({"sha": sha, "bitsandbytes": sys.modules.get("bitsandbytes") is not None, "peft": "peft" in sys.modules}))
"""


def test_the_artifact_writer_process_writes_the_same_adapter_with_bitsandbytes_kept_out(model_dir, tmp_path):
    """The artifact writer process (services/finalizer/writer.py) never imports bitsandbytes (peft would, with torch's
    inductor: ~1 CPU s of its first artifact), and writes the adapter byte for byte as another process does (peft's
    target_modules, a set, is written sorted: in set order the config differed between two processes)."""
    import subprocess

    import numpy as np
    _, state, recipe = trained(model_dir, "lora")
    np.savez(tmp_path / "state.npz", **state)
    out = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path / "fin"), str(tmp_path / "state.npz"),
                          json.dumps(recipe), str(tmp_path / "a")], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["peft"] and not got["bitsandbytes"]
    here = write_artifact(state, recipe=recipe, out=tmp_path / "b", run_id="r1", versions={0: 3}, acked=["island-0"])
    assert got["sha"] == here[2]           # the manifest names every file by its sha256: the same files
