"""`yeto merge` folds a real peft adapter into its base, shards the weights, and refuses unsafe merges."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_model_dir
from yeto.cli.main import main


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path / "state"))    # the merge is signed with this stack's key


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("merge")
    base = write_model_dir(root / "base")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)        # a non-trivial adapter: merging must change the weights
    out = root / "adapter"
    model.save_pretrained(out)
    files = {f.name: __import__("hashlib").sha256(f.read_bytes()).hexdigest() for f in out.iterdir()}
    (out / "manifest.json").write_text(json.dumps({"base_model": str(base), "run_id": "r1", "files": files}))
    return base, out, model.eval()


def test_merge_writes_shards_that_transformers_loads_with_the_adapters_outputs(adapter, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    base, path, peft_model = adapter
    out = tmp_path / "merged"
    assert main(["merge", str(path), "--out", str(out), "--max-shard-size", "100KB"]) == 0
    assert len(list(out.glob("*.safetensors"))) > 1 and (out / "model.safetensors.index.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 5, 7, 9, 3]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, peft_model(ids).logits, atol=1e-4)
        assert not torch.allclose(merged(ids).logits, AutoModelForCausalLM.from_pretrained(base)(ids).logits, atol=1e-3)
    assert "shard(s)" in capsys.readouterr().out


def test_merge_refuses_a_tampered_adapter_another_base_and_a_used_output(adapter, tmp_path, capsys):
    base, path, _ = adapter
    other = write_model_dir(tmp_path / "other", seed=1)
    assert main(["merge", str(path), "--out", str(tmp_path / "a"), "--base", str(other)]) == 2
    assert "pass --force" in capsys.readouterr().err
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("x")
    assert main(["merge", str(path), "--out", str(used)]) == 2
    assert "not empty" in capsys.readouterr().err
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    for f in path.iterdir():
        (tampered / f.name).write_bytes(f.read_bytes())
    (tampered / "adapter_config.json").write_text((path / "adapter_config.json").read_text().replace('"r": 4', '"r": 4 '))
    assert main(["merge", str(tampered), "--out", str(tmp_path / "b")]) == 2
    assert "changed since the run wrote the artifact" in capsys.readouterr().err


def test_merge_shows_no_library_bars_or_deprecation_notices_unless_verbose(adapter, tmp_path):
    """In a process of its own, as a user runs it (the bars and notices are process-wide switches)."""
    import os
    import subprocess

    _, path, _ = adapter
    env = {k: v for k, v in os.environ.items() if k not in ("YETO_VERBOSE", "HF_HUB_DISABLE_PROGRESS_BARS")}

    def merge(*flags: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "yeto.cli.main", "merge", str(path), "--out",
                               str(tmp_path / f"out{len(flags)}"), *flags], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return done
    quiet, verbose = merge(), merge("--verbose")
    assert quiet.stdout.startswith("merged ") and quiet.stderr == ""
    assert "Loading weights" in verbose.stderr and "Writing model shards" in verbose.stderr     # the libraries' bars
