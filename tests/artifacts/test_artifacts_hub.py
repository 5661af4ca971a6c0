"""Hub-ready artifacts: the adapter names its base by Hub id (AutoPeftModelForCausalLM loads it offline from a cached
base), a model card with Hub metadata is one of the signed files, and `yeto merge` keeps the base's dtype."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_model_dir
from yeto.cli.main import main
from yeto.infra.model_source import SMOLLM2_HF_ID
from yeto.services.finalizer.card import hub_id, model_card

pytestmark = pytest.mark.timeout(240)
torch.set_num_threads(2)
HUB_ID, COMMIT = "yeto-test/tiny-base", "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path / "state"))    # `yeto merge` and `yeto verify` use this stack


@pytest.fixture(scope="module")
def hub_artifact(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """An artifact whose base is a Hub id, written and loaded back in a process that sees only an offline HF cache
    (and that process's environment)."""
    root = tmp_path_factory.mktemp("hub")
    snapshot = root / "hf" / "hub" / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / COMMIT
    write_model_dir(snapshot)                                    # the cache layout huggingface_hub reads offline
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(COMMIT)
    env = {**os.environ, "HF_HOME": str(root / "hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("hub_worker.py")), HUB_ID, COMMIT,
                           str(root / "artifact")], env=env, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["max_abs_error"] < 1e-4 and result["base_class"] == "LlamaForCausalLM"
    return root / "artifact", env


def test_the_adapter_names_its_base_by_hub_id_and_pinned_commit(hub_artifact):
    config = json.loads((hub_artifact[0] / "artifact" / "adapter_config.json").read_text())
    assert (config["base_model_name_or_path"], config["revision"]) == (HUB_ID, COMMIT)


def test_the_card_carries_hub_metadata_and_the_run_and_is_signed_with_the_rest(hub_artifact, capsys):
    from huggingface_hub import ModelCard

    artifact, _ = hub_artifact
    card = ModelCard.load(artifact / "artifact" / "README.md")
    assert (card.data.library_name, card.data.base_model, card.data.tags) == ("peft", HUB_ID, ["yeto", "diloco", "lora"])
    assert card.data.datasets == ["yeto-test/chat"]
    for text in (f"revision `{COMMIT}`", "| LoRA r / alpha / dropout | 4 / 8 / 0.0 |", "Rounds merged: 5",
                 "| island-0 | 20 | 1.2345 | 1.5000 |", "| 0 | local | 1× cpu |", "| rows used | 90 |",
                 "AutoPeftModelForCausalLM", f"hf download {HUB_ID} --revision {COMMIT} --local-dir base",
                 'PeftModel.from_pretrained(base, "<output>/artifact")',          # offline: a local copy of the base
                 "`yeto verify <output>`"):
        assert text in card.text, text
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert "artifact/README.md" in manifest["files"] and manifest["provenance"]["yeto"]["version"] in card.text


def test_merge_loads_the_hub_base_at_its_pinned_commit(hub_artifact, tmp_path):
    (artifact, env), out = hub_artifact, tmp_path / "merged"
    done = subprocess.run([sys.executable, "-m", "yeto.cli.main", "merge", str(artifact), "--out", str(out)],
                          env={**env, "YETO_HOME": str(tmp_path / "state")}, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"into {HUB_ID}: 1 float32 shard(s)" in done.stdout       # auto: the tiny base's own dtype


def test_the_cards_offline_recipe_loads_the_adapter_on_a_local_copy_of_the_hub_base(hub_artifact, tmp_path):
    """With an empty Hugging Face cache and no network, AutoPeftModelForCausalLM cannot find the Hub id; the card's
    snippet, run as written beside the `base` folder its `hf download ... --local-dir base` line makes (here a copy
    of the same repo files), loads the adapter and gives what peft gives on the cached base."""
    import re

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    artifact, env = hub_artifact
    snapshot = Path(env["HF_HOME"]) / "hub" / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / COMMIT
    shutil.copytree(snapshot, tmp_path / "base")             # what `hf download --local-dir base` leaves: the repo's files
    empty = {**env, "HF_HOME": str(tmp_path / "empty-hf")}
    ids = [[2, 5, 6, 7, 8, 9]]

    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], env=empty, cwd=tmp_path, capture_output=True, text=True,
                              timeout=200)
    deploy = artifact / "artifact"
    assert run(f"from peft import AutoPeftModelForCausalLM\nAutoPeftModelForCausalLM.from_pretrained({str(deploy)!r})"
               ).returncode != 0                               # why the card says how to load it offline
    section = (deploy / "README.md").read_text().split("## Offline, with a local base", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1).replace("<output>", str(artifact))
    done = run(snippet + f"import json, torch\nwith torch.no_grad():\n    print(json.dumps(model(input_ids="
                         f"torch.tensor({ids})).logits[0, -1].tolist()))\n")
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    base = AutoModelForCausalLM.from_pretrained(snapshot)
    with torch.no_grad():
        plain = base(input_ids=torch.tensor(ids)).logits[0, -1]
        expected = PeftModel.from_pretrained(base, str(deploy)).eval()(input_ids=torch.tensor(ids)).logits[0, -1]
    assert torch.allclose(got, expected, atol=1e-5) and not torch.allclose(got, plain, atol=1e-3)


def test_local_and_alias_bases(tmp_path):
    assert hub_id("smollm2-135m") == SMOLLM2_HF_ID and hub_id("HuggingFaceTB/SmolLM2-135M-Instruct") == SMOLLM2_HF_ID
    assert hub_id("some-org/some-model") == "some-org/some-model"
    base = write_model_dir(tmp_path / "base")
    assert hub_id(str(base)) is None
    card = model_card(run_id="r1", kind="full", recipe={"train": {"model": str(base), "tuning": "full"}},
                      provenance={"data": {"source": str(base)}}, run={})
    assert card.data.library_name == "transformers" and card.data.base_model is None and card.data.datasets is None
    assert f"the local model `{base}` (no Hub id" in card.text and "AutoModelForCausalLM" in card.text
    assert "## Offline" not in card.text                     # a full model loads from its own folder
    adapter = model_card(run_id="r1", kind="adapter", recipe={"train": {"model": str(base)}}, provenance={}, run={})
    assert f'base = AutoModelForCausalLM.from_pretrained("{base}")' in adapter.text


@pytest.fixture(scope="module")
def bf16_adapter(tmp_path_factory):
    """A tiny base saved in bf16 and a non-trivial peft adapter of it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("bf16")
    f32 = write_model_dir(root / "f32")
    base = root / "base"
    AutoModelForCausalLM.from_pretrained(f32, dtype=torch.bfloat16).save_pretrained(base)
    for f in f32.glob("tokenizer*"):
        shutil.copy(f, base / f.name)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.1)
    model.save_pretrained(root / "adapter")
    return base, root / "adapter"


def _dtypes(folder: Path) -> set[str]:
    from safetensors import safe_open

    dtypes = set()
    for f in folder.glob("*.safetensors"):
        with safe_open(f, "pt") as st:
            dtypes |= {str(st.get_slice(n).get_dtype()) for n in st.keys()}
    return dtypes


@pytest.mark.parametrize(("flag", "dtype"), [([], "BF16"), (["--dtype", "fp16"], "F16")])
def test_merge_keeps_the_bases_dtype_unless_told(bf16_adapter, tmp_path, flag, dtype, capsys):
    base, adapter = bf16_adapter
    out = tmp_path / "merged"
    assert main(["merge", str(adapter), "--out", str(out), "--base", str(base), *flag]) == 0, capsys.readouterr().err
    assert _dtypes(out) == {dtype}
    assert json.loads((out / "manifest.json").read_text())["merge"]["dtype"] == {"BF16": "bfloat16", "F32": "float32",
                                                                                 "F16": "float16"}[dtype]
    assert main(["verify", str(out)]) == 0
