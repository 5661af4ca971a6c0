"""The run's output folder as the finalizer writes it (schemas/artifact_layout.py): `artifact/` holds what a user
deploys and nothing else, `resume/` the final fragments beside it, the signed manifest at the top names both;
`yeto verify` and `yeto merge` take the folder or its `artifact/`, an hf:// output's repo is `artifact/` with the
manifest (no resume state), and a run resumes from the folder or its `artifact/`. Real peft adapter, real snapshots."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_model_dir
from yeto.cli.launch.lineage import find_artifact
from yeto.cli.main import main
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.model import load_model, resolve
from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
from yeto.services.finalizer.artifact import sha256_file, write_artifact
from yeto.services.finalizer.output import hub_files
from yeto.services.syncer import snapshot

pytestmark = pytest.mark.timeout(240)
DATA_CHECK = {"source": "chat.jsonl", "revision": None, "fingerprint": "ab" * 32, "num_rows": 100, "num_bad": 0}


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path / "state"))    # `yeto merge` signs with this stack's key


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> Path:
    """A LoRA run's output folder over a tiny local base, with two fragments' final snapshots."""
    torch.set_num_threads(2)
    root = tmp_path_factory.mktemp("layout")
    base = write_model_dir(root / "base")
    recipe = TrainRecipe(model=str(base), tuning="lora", lora_r=4, lora_alpha=8, seed=1)
    model = apply_tuning(load_model(resolve(str(base))), recipe)
    with torch.no_grad():
        for _, p in trainable_parameters(model):
            p.add_(0.05)                       # stand-in for training: every adapter tensor moves
    state = {n: p.detach().numpy().copy() for n, p in trainable_parameters(model)}
    snaps = root / "syncer"
    for frag in (0, 1):
        theta = np.full(8, frag, dtype=np.float32)
        snapshot.write(snaps, snapshot.FragmentSnapshot(fragment=frag, version=3, fingerprint="fp", theta=theta,
                                                        momentum=theta, shadow=theta,
                                                        ledger={"island-0": {"generation": 0, "last_step": 12}}))
    out = root / "output"
    write_artifact(state, recipe={"train": {**recipe.to_dict(), "data": "chat.jsonl"}, "data_check": DATA_CHECK},
                   out=out, run_id="r-layout", versions={0: 3, 1: 3}, acked=["island-0"], snapshot_dir=snaps,
                   key=Ed25519PrivateKey.generate())
    return out


def test_the_deployable_files_sit_in_artifact_and_the_resume_state_beside_it(output):
    assert sorted(p.name for p in output.iterdir()) == ["artifact", "manifest.json", "manifest.sig", "resume"]
    deploy = sorted(p.name for p in (output / "artifact").iterdir())
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer.json"} <= set(deploy)
    assert not [n for n in deploy if "frag" in n or n.startswith("manifest")], deploy
    assert sorted(p.name for p in (output / "resume").iterdir()) == ["frag-0000.safetensors", "frag-0001.safetensors"]
    manifest = json.loads((output / "manifest.json").read_text())
    assert set(manifest["files"]) == {f"artifact/{n}" for n in deploy} | {"resume/frag-0000.safetensors",
                                                                           "resume/frag-0001.safetensors"}
    assert manifest["resume"]["files"] == ["resume/frag-0000.safetensors", "resume/frag-0001.safetensors"]
    assert manifest["resume"]["start_step"] == 12
    resume_bytes = sum((output / "resume" / n).stat().st_size for n in ("frag-0000.safetensors", "frag-0001.safetensors"))
    print(f"artifact/ {sum(p.stat().st_size for p in (output / 'artifact').iterdir())} B, resume/ {resume_bytes} B")


def test_yeto_verify_checks_both_folders_and_names_a_changed_resume_file(output, tmp_path, capsys):
    assert main(["verify", str(output)]) == 0
    assert "verified" in capsys.readouterr().out
    changed = tmp_path / "changed"
    shutil.copytree(output, changed)
    (changed / "resume" / "frag-0001.safetensors").write_bytes(b"not theta")
    assert main(["verify", str(changed)]) == 1
    assert "FAILED resume/frag-0001.safetensors: changed" in capsys.readouterr().out


def test_an_hf_output_is_the_artifact_folder_with_the_manifest_and_no_resume_state(output):
    plan = hub_files(output)
    deploy = sorted(p.name for p in (output / "artifact").iterdir())
    assert plan == {**{n: f"artifact/{n}" for n in deploy}, "manifest.json": "manifest.json",
                    "manifest.sig": "manifest.sig"}
    assert not [n for n in plan.values() if n.startswith("resume")]


def test_merge_takes_the_output_folder_or_its_artifact_folder(output, tmp_path, capsys):
    for given, out in ((output, tmp_path / "m1"), (output / "artifact", tmp_path / "m2")):
        assert main(["merge", str(given), "--out", str(out)]) == 0, capsys.readouterr().err
        merged = json.loads((out / "manifest.json").read_text())["merge"]
        assert merged["source"] == str(output) and merged["source_manifest_sha256"] == sha256_file(output / "manifest.json")
    assert sha256_file(tmp_path / "m1" / "model.safetensors") == sha256_file(tmp_path / "m2" / "model.safetensors")


def test_a_resume_finds_the_output_folder_from_itself_or_its_artifact_folder(output, tmp_path):
    assert find_artifact(str(output), tmp_path) == output.resolve()
    assert find_artifact(str(output / "artifact"), tmp_path) == output.resolve()


def flat_copy(output: Path, dest: Path) -> Path:
    """The folder as a run finalized before `artifact/` and `resume/` wrote it: every file at the top, the resume
    state as resume.frag-<p>.safetensors, the manifest naming them so and signed."""
    from yeto.infra import signing

    names = {n: n.removeprefix("artifact/").replace("resume/", "resume.")
             for n in json.loads((output / "manifest.json").read_text())["files"]}
    dest.mkdir()
    for new, old in ((v, k) for k, v in names.items()):
        (dest / new).write_bytes((output / old).read_bytes())
    manifest = json.loads((output / "manifest.json").read_text())
    key = Ed25519PrivateKey.generate()
    manifest.update(files={names[k]: v for k, v in manifest["files"].items()}, signer_public_key=signing.public_hex(key),
                    resume={**manifest["resume"], "files": sorted(n for n in names.values() if n.startswith("resume."))})
    text = json.dumps(manifest, indent=2, sort_keys=True)
    (dest / "manifest.json").write_text(text)
    (dest / signing.SIG_FILE).write_text(signing.sign(key, text.encode()) + "\n")
    return dest


def test_a_flat_folder_finalized_before_the_switch_still_verifies_merges_and_seeds_a_resume(output, tmp_path, capsys):
    from yeto.services.syncer import seed

    flat = flat_copy(output, tmp_path / "flat")
    assert main(["verify", str(flat)]) == 0, capsys.readouterr().out
    for given, out in ((flat, tmp_path / "from-flat"), (output, tmp_path / "from-output")):
        assert main(["merge", str(given), "--out", str(out)]) == 0, capsys.readouterr().err
    assert sha256_file(tmp_path / "from-flat" / "model.safetensors") == \
        sha256_file(tmp_path / "from-output" / "model.safetensors")     # the same adapter, read from either layout
    assert find_artifact(str(flat), tmp_path) == flat.resolve()
    snaps = seed.read(flat, None, momentum=True)
    assert sorted(snaps) == [0, 1] and all(s.version == 3 for s in snaps.values())
    assert hub_files(flat) == {n: n for n in sorted(p.name for p in flat.iterdir())}     # goes as it is


def test_the_run_follower_says_where_to_deploy_and_resume_from():
    from yeto.cli.follow import Progress
    from yeto.schemas.final import ArtifactWritten

    def line(output: str, files: list[str]) -> str | None:
        return Progress().line(ArtifactWritten(id="a", run_id="r", source="finalizer", output=output, local_path="/s/a",
                                               artifact_kind="adapter", files=files, manifest_sha256="1" * 64))
    nested = ["artifact/adapter_model.safetensors", "resume/frag-0000.safetensors", "manifest.json"]
    assert line("/out", nested) == ("artifact (adapter) written to /out: deploy /out/artifact (its README.md says how), "
                                    "resume from /out")
    assert line("s3://b/r", nested) == "artifact (adapter) written to s3://b/r: deploy s3://b/r/artifact (its README.md says how)"
    assert line("hf://org/repo", nested) == "artifact (adapter) written to hf://org/repo"     # the repo is artifact/
    assert line("/old", ["adapter_model.safetensors", "manifest.json"]) == "artifact (adapter) written to /old"
    assert line("/diffusion", ["artifact/pytorch_lora_weights.safetensors", "manifest.json"]) == (
        "artifact (adapter) written to /diffusion: deploy /diffusion/artifact (its README.md says how)")  # no resume/


def test_yeto_pull_says_where_the_deployable_files_and_the_resume_state_are(output, tmp_path):
    from yeto.cli.pull import layout_of

    assert layout_of(output) == f"{output / 'artifact'}; the resume state is in {output / 'resume'}"
    assert layout_of(flat_copy(output, tmp_path / "flat")).endswith("(a flat folder: finalized before artifact/ and resume/)")


def test_yeto_verify_of_the_artifact_folder_checks_the_output_folder_above_it_resume_state_too(output, tmp_path, capsys):
    assert main(["verify", str(output / "artifact")]) == 0
    out = capsys.readouterr().out
    deploy = len(list((output / "artifact").iterdir()))
    assert f"files signed ({deploy} in artifact/, 2 in resume/)" in out
    assert f"checked:  the output folder {output}" in out and "verified" in out
    changed = Path(shutil.copytree(output, tmp_path / "changed"))
    (changed / "resume" / "frag-0000.safetensors").write_bytes(b"not theta")
    assert main(["verify", str(changed / "artifact")]) == 1
    assert "FAILED resume/frag-0000.safetensors: changed" in capsys.readouterr().out


def hub_copy(output: Path, dest: Path) -> Path:
    """What a download of an hf:// output's repo holds: the upload plan's files (output.hub_files), and the Hub's own."""
    for there, here in hub_files(output).items():
        (dest / there).parent.mkdir(parents=True, exist_ok=True)
        (dest / there).write_bytes((output / here).read_bytes())
    (dest / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    return dest


def test_a_download_of_the_hub_repo_verifies_merges_and_is_refused_as_a_resume_parent(output, tmp_path, capsys):
    from types import SimpleNamespace

    from yeto.cli.launch import lineage

    copy = hub_copy(output, tmp_path / "hub")
    assert main(["verify", str(copy), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["not_here"] == ["resume/frag-0000.safetensors", "resume/frag-0001.safetensors"]
    assert (verdict["changed"], verdict["extra"]) == ([], [])
    assert main(["merge", str(copy), "--out", str(tmp_path / "m-hub")]) == 0, capsys.readouterr().err
    assert main(["merge", str(output), "--out", str(tmp_path / "m-out")]) == 0
    assert sha256_file(tmp_path / "m-hub" / "model.safetensors") == sha256_file(tmp_path / "m-out" / "model.safetensors")
    args = SimpleNamespace(resume_from=str(copy), branch_from=None, state_dir=str(tmp_path / "state"))
    with pytest.raises(ValueError, match="lacks resume/frag-0000.safetensors that its manifest names .a copy of artifact/"):
        lineage.apply(args, None)
    (copy / "adapter_model.safetensors").write_bytes(b"other weights")
    (copy / "notes.txt").write_text("added")
    capsys.readouterr()
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "FAILED adapter_model.safetensors: changed" in out and "FAILED notes.txt: not in the manifest" in out
