"""A run's artifact is signed with the stack's Ed25519 key and records its provenance; `yeto verify` passes it, and
fails a tampered, removed or added file by name, an edited manifest, and another signer than --key; `yeto merge`
carries the provenance into the merged model, records the merge, and signs the merged manifest."""
from __future__ import annotations

import hashlib
import json
import shutil
import stat
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_model_dir
from yeto.cli.launch import checks
from yeto.cli.main import main
from yeto.infra import signing
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.model import load_model, resolve
from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
from yeto.services.finalizer.artifact import write_artifact

pytestmark = pytest.mark.timeout(180)
torch.set_num_threads(2)
RUN = {"fleet": [{"island": 0, "cloud": "local", "gpu": "cpu", "count": 1, "generations": 2}], "rounds_merged": 7,
       "learner_steps": {"island-0": 12}}
DATA_CHECK = {"source": "chat.jsonl", "revision": None, "fingerprint": "ab" * 32, "num_rows": 100, "num_bad": 2,
              "on_bad_rows": "skip"}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """(base folder, a signed LoRA artifact written by the finalizer's writer, the stack's state dir)."""
    root = tmp_path_factory.mktemp("prov")
    base = write_model_dir(root / "base")
    recipe = TrainRecipe(model=str(base), tuning="lora", lora_r=4, seed=1)
    model = apply_tuning(load_model(resolve(str(base))), recipe)
    with torch.no_grad():
        for _, p in trainable_parameters(model):
            p.add_(0.05)                       # stand-in for training: every adapter tensor moves
    state = {n: p.detach().numpy().copy() for n, p in trainable_parameters(model)}
    train = checks.pin_sources({**recipe.to_dict(), "data": "chat.jsonl"}, DATA_CHECK)
    key = signing.stack_key(root / "state")
    write_artifact(state, recipe={"train": train, "data_check": DATA_CHECK}, out=root / "artifact", run_id="r-prov",
                   versions={0: 7}, acked=["island-0"], run=RUN, key=key)
    return base, root / "artifact", root / "state"


def copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "copy"))


def test_the_stack_key_is_made_once_owner_only_and_signs_deterministically(tmp_path):
    key = signing.stack_key(tmp_path)
    path = signing.key_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing.public_hex(signing.stack_key(tmp_path)) == signing.public_hex(key)       # loaded, not made again
    sig = signing.sign(key, b"manifest")
    assert sig == signing.sign(key, b"manifest") and signing.signature_ok(signing.public_hex(key), b"manifest", sig)
    assert not signing.signature_ok(signing.public_hex(key), b"manifest!", sig)
    assert not signing.signature_ok("00" * 32, b"manifest", sig) and not signing.signature_ok("zz", b"manifest", "zz")


def test_the_manifest_records_provenance_and_verify_passes_and_says_what_it_records(artifact, capsys):
    base, folder, state = artifact
    manifest = json.loads((folder / "manifest.json").read_text())
    prov = manifest["provenance"]
    assert manifest["manifest_version"] == 2 and prov["base"] == manifest["recipe"]["train"]["pins"]["base"]
    assert prov["base"]["files"]["model.safetensors"] == hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()
    assert prov["data"] == {"source": "chat.jsonl", "revision": None, "fingerprint": "ab" * 32, "rows_used": 98,
                            "bad_rows_skipped": 2, "files": {}}
    assert (prov["fleet"], prov["rounds_merged"], prov["learner_steps"]) == (RUN["fleet"], 7, {"island-0": 12})
    assert len(prov["yeto"]["package_sha256"]) == 64 and prov["yeto"]["git_commit"]
    assert prov["libraries"]["torch"] and prov["libraries"]["transformers"] and prov["libraries"]["python"]
    key = signing.public_hex(signing.stack_key(state))
    assert manifest["signer_public_key"] == key
    assert main(["verify", str(folder), "--key", key]) == 0
    out = capsys.readouterr().out
    assert f"base:     {base}" in out and "7 merged" in out and "local:1xcpu (2 gen)" in out and f"signer:   {key}" in out
    assert "98 rows used, 2 bad rows skipped" in out and out.rstrip().endswith("every file's sha256 match")
    assert f"torch {prov['libraries']['torch']}" in out


def test_a_tampered_removed_or_added_file_fails_verify_naming_the_file(artifact, tmp_path, capsys):
    folder = copy(artifact[1], tmp_path)
    weights = folder / "artifact" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    (folder / "artifact" / "tokenizer.json").unlink()
    (folder / "backdoor.py").write_text("print('hi')")
    assert main(["verify", str(folder)]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAILED")]
    assert failed == ["FAILED artifact/adapter_model.safetensors: changed (sha256 " + failed[0].split("sha256 ")[1],
                      "FAILED artifact/tokenizer.json: missing",
                      "FAILED backdoor.py: not in the manifest (added after the run wrote it)"]
    assert main(["verify", str(folder), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and report["signature"] == "ok" and report["extra"] == ["backdoor.py"]


def test_an_edited_manifest_another_signer_or_a_missing_signature_fails(artifact, tmp_path, capsys):
    folder = copy(artifact[1], tmp_path)
    manifest = (folder / "manifest.json").read_text()
    assert main(["verify", str(folder), "--key", "11" * 32]) == 1
    assert "not by the --key given" in capsys.readouterr().out
    (folder / "manifest.json").write_text(manifest.replace('"rounds_merged": 7', '"rounds_merged": 70'))
    assert main(["verify", str(folder)]) == 1
    assert "FAILED manifest.json: the signature does not match" in capsys.readouterr().out
    (folder / "manifest.json").write_text(manifest)
    (folder / "manifest.sig").unlink()
    assert main(["verify", str(folder)]) == 1
    assert "FAILED manifest.sig: missing" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "nothing")]) == 2
    assert "no readable manifest.json" in capsys.readouterr().err


def test_merge_carries_the_provenance_records_the_merge_and_signs_the_merged_model(artifact, tmp_path, capsys):
    base, folder, _ = artifact
    here = tmp_path / "laptop-state"
    assert main(["--state-dir", str(here), "merge", str(folder), "--out", str(tmp_path / "merged")]) == 0
    source = json.loads((folder / "manifest.json").read_text())
    merged = json.loads((tmp_path / "merged" / "manifest.json").read_text())
    assert merged["provenance"] == source["provenance"] and merged["kind"] == "merged" and merged["run_id"] == "r-prov"
    record = merged["merge"]
    assert record["source_manifest_sha256"] == hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    assert record["source_signer_public_key"] == source["signer_public_key"] and record["dtype"] == "float32"
    assert record["base"] == str(base) and not record["forced_other_base"] and record["probe_max_abs_error"] < 1e-3
    assert merged["signer_public_key"] == signing.public_hex(signing.stack_key(here))
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "merged")]) == 0
    assert "merge:    of the artifact whose manifest has sha256" in capsys.readouterr().out


def test_merge_refuses_an_artifact_whose_signature_or_pinned_base_does_not_match(artifact, tmp_path, capsys):
    base, folder, _ = artifact
    forged = copy(folder, tmp_path)
    (forged / "manifest.sig").write_text("00" * 64)
    assert main(["--state-dir", str(tmp_path / "s"), "merge", str(forged), "--out", str(tmp_path / "m1")]) == 2
    assert "the signature does not match" in capsys.readouterr().err
    moved = tmp_path / "moved-base"
    write_model_dir(moved, seed=3)                  # another base at the recorded path: its weights differ
    record = json.loads((folder / "manifest.json").read_text())
    assert record["provenance"]["base"]["files"]["model.safetensors"] != hashlib.sha256(
        (moved / "model.safetensors").read_bytes()).hexdigest()
    shutil.copy(moved / "model.safetensors", base / "model.safetensors")
    try:
        assert main(["--state-dir", str(tmp_path / "s"), "merge", str(folder), "--out", str(tmp_path / "m2")]) == 2
        assert "model.safetensors has sha256" in capsys.readouterr().err
    finally:
        write_model_dir(base)                       # the module's base again (seed 0: the same bytes)
