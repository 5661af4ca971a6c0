"""What a cloud run's head gets besides its credentials: a local --data (file or folder), a local --model (folder or
.gguf file) and a resume's parent artifact copied into the head's bundle, private, named at the head's path (a store
URI, a Hub id or an alias unchanged), the model mounted on each island where the launch's pins still hold; and the
store package its finalizer uploads --output with, installed by the head's setup (offline: the setup text, per scheme)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from yeto.cli.launch.cloud import ship
from yeto.infra.head import records as heads
from yeto.infra.head.data import ship_data, ship_model, ship_parent
from yeto.infra.source_pins import pin_model, pinned_source
from yeto.schemas.commands import LaunchRun
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.sky_tasks import head_setup, head_task, island_task, model_mount, setup_script
from yeto.services.syncer import seed, snapshot

MODEL_FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"weights", "tokenizer.json": b"{}",
               "README.md": b"# notes"}


def private(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        assert oct(path.stat().st_mode & 0o777) == ("0o700" if path.is_dir() else "0o600"), path


def head_and_island(tmp_path: Path, monkeypatch, head_path: str) -> tuple[str, dict]:
    """The head's launcher (its HOME holding the bundle at ~/.yeto/head) builds the island's mount for the recipe's
    model; the island's HOME gets what it ships. (the path the island's recipe names, the island's HOME)."""
    (tmp_path / "head" / ".yeto").mkdir(parents=True)
    (tmp_path / "head" / ".yeto" / "head").symlink_to(heads.bundle_dir(tmp_path / "laptop", "r-m"))
    monkeypatch.setenv("HOME", str(tmp_path / "head"))
    mounts, path = model_mount(head_path)
    island = tmp_path / "island"
    for target, source in mounts.items():
        dest = island / target.removeprefix("~/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if Path(source).is_dir() else shutil.copy)(source, dest)
    monkeypatch.setenv("HOME", str(island))
    return path, mounts


def test_a_local_model_folder_ships_through_the_head_to_each_island_and_its_pins_still_hold(tmp_path, monkeypatch):
    model = tmp_path / "my models" / "tiny"
    (model / ".cache" / "huggingface").mkdir(parents=True)
    (model / ".cache" / "huggingface" / "download.lock").write_bytes(b"x")
    for name, body in MODEL_FILES.items():
        (model / name).write_bytes(body)
    pin = pin_model(f"{model}/")                      # taken on the laptop, before the copy
    heads.prepare_bundle(tmp_path / "laptop", "r-m", {})
    head_path = ship_model(tmp_path / "laptop", "r-m", f"{model}/")
    assert head_path == "~/.yeto/head/model/tiny"
    shipped = heads.bundle_dir(tmp_path / "laptop", "r-m") / "model" / "tiny"
    assert {p.name: p.read_bytes() for p in shipped.rglob("*")} == MODEL_FILES      # hidden entries stay home
    private(shipped.parent)
    path, mounts = head_and_island(tmp_path, monkeypatch, head_path)
    assert path == "~/.yeto/model/tiny" and list(mounts) == [path]
    assert pinned_source(path, pin).location == str(tmp_path / "island" / ".yeto" / "model" / "tiny")
    (tmp_path / "island" / ".yeto" / "model" / "tiny" / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(ValueError, match="model.safetensors has sha256"):
        pinned_source(path, pin)


def test_a_gguf_model_file_ships_alone_and_aliases_and_hub_ids_stay(tmp_path, monkeypatch):
    (tmp_path / "ggufs").mkdir()
    (tmp_path / "ggufs" / "tiny-q8.gguf").write_bytes(b"GGUF tiny")
    (tmp_path / "ggufs" / "other.gguf").write_bytes(b"GGUF other")
    pin = pin_model(str(tmp_path / "ggufs" / "tiny-q8.gguf"))
    heads.prepare_bundle(tmp_path / "laptop", "r-m", {})
    for name in ("smollm2-135m", "qwen35-9b", "HuggingFaceTB/SmolLM2-135M-Instruct", "org/model"):
        assert ship_model(tmp_path / "laptop", "r-m", name) == name and model_mount(name) == ({}, name)
    head_path = ship_model(tmp_path / "laptop", "r-m", str(tmp_path / "ggufs" / "tiny-q8.gguf"))
    assert head_path == "~/.yeto/head/model/tiny-q8.gguf"
    assert sorted(p.name for p in (heads.bundle_dir(tmp_path / "laptop", "r-m") / "model").iterdir()) == ["tiny-q8.gguf"]
    path, _ = head_and_island(tmp_path, monkeypatch, head_path)
    source = pinned_source(path, pin)
    assert (path, source.gguf_file, source.location) == ("~/.yeto/model/tiny-q8.gguf", "tiny-q8.gguf",
                                                          str(tmp_path / "island" / ".yeto" / "model"))


def test_the_islands_task_mounts_the_heads_model_copy_and_its_recipe_names_the_islands_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".yeto" / "head" / "model" / "tiny").mkdir(parents=True)
    (tmp_path / ".yeto" / "head" / "model" / "tiny" / "config.json").write_text("{}")
    recipe = {"train": {"model": "~/.yeto/head/model/tiny", "data": "org/chat"}}
    launch = IslandLaunch(run_id="r1", island=0, generation=0, num_islands=1, nats_url="tls://10.0.0.1:4222",
                          spec={"cloud": "aws", "gpu": "T4", "count": 1}, recipe=recipe)
    task = island_task(launch)
    assert task.file_mounts == {"~/.yeto/model/tiny": str(tmp_path / ".yeto" / "head" / "model" / "tiny")}
    learner = json.loads(task.envs["YETO_RECIPE"])      # the train section in full (schemas/train_section.py)
    assert (learner["model"], learner["data"]) == ("~/.yeto/model/tiny", "org/chat")


@pytest.mark.parametrize("layout", ["output", "flat"])     # flat: a parent finalized before artifact/ and resume/
def test_a_resumes_parent_goes_to_the_head_and_the_syncer_seeds_from_the_copy(tmp_path, monkeypatch, layout):
    artifact = tmp_path / "runs" / "parent-run" / "artifact"
    theta, resume = np.arange(6, dtype=np.float32), "resume/frag-0000" if layout == "output" else "resume.frag-0000"
    frag, _ = snapshot.write(artifact, snapshot.FragmentSnapshot(0, 7, "f", theta, theta + 1, theta))
    (artifact / "resume").mkdir()
    frag.rename(artifact / f"{resume}.safetensors")
    deploy = "artifact/" if layout == "output" else ""
    for name, body in {"manifest.json": b"{}", f"{deploy}adapter_model.safetensors": b"big",
                       f"{deploy}README.md": b"card"}.items():
        (artifact / name).parent.mkdir(exist_ok=True)
        (artifact / name).write_bytes(body)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    heads.prepare_bundle(tmp_path / "laptop", "r-m", {})
    train = {"model": str(tmp_path / "model"), "data": "org/chat", "sync": {"seed": str(artifact), "seed_momentum": True}}
    launch = LaunchRun(run_id="r-m", source="cli", fleet=[{"cloud": "aws", "count": 1, "accelerator": "T4"}],
                       recipe={"train": train, "bus_url": ""})
    shipped = ship(tmp_path / "laptop", launch).recipe["train"]
    assert (shipped["model"], shipped["data"], shipped["sync"]["seed"], shipped["sync"]["seed_momentum"]) == (
        "~/.yeto/head/model/model", "org/chat", "~/.yeto/head/parent/artifact", True)
    parent = heads.bundle_dir(tmp_path / "laptop", "r-m") / "parent"
    assert sorted(p.relative_to(parent).as_posix() for p in parent.rglob("*") if p.is_file()) == [
        "artifact/manifest.json", f"artifact/{resume}.safetensors"]         # not the weights for people
    private(parent)
    (tmp_path / "head" / ".yeto").mkdir(parents=True)
    (tmp_path / "head" / ".yeto" / "head").symlink_to(heads.bundle_dir(tmp_path / "laptop", "r-m"))
    monkeypatch.setenv("HOME", str(tmp_path / "head"))
    snaps = seed.read(Path(shipped["sync"]["seed"]).expanduser(), None, momentum=True)
    assert list(snaps) == [0] and snaps[0].version == 7 and np.array_equal(snaps[0].momentum, theta + 1)
    assert ship_parent(tmp_path / "laptop", "r-m", artifact) == "~/.yeto/head/parent/artifact"     # again: same copy


def test_a_local_data_folder_is_copied_into_the_bundle_privately_and_named_at_the_heads_path(tmp_path):
    data = tmp_path / "my data" / "traces"
    (data / "part" / "deep").mkdir(parents=True)
    files = {"a.jsonl": b'{"text": "one"}\n', "part/b.parquet": b"PAR1", "part/deep/c.json": b"[]", ".hidden": b"h"}
    for name, body in files.items():
        (data / name).write_bytes(body)
        (data / name).chmod(0o644)
    heads.prepare_bundle(tmp_path / "laptop", "r-data", {})
    assert ship_data(tmp_path / "laptop", "r-data", f"{data}/") == "~/.yeto/head/data/traces"
    shipped = heads.bundle_dir(tmp_path / "laptop", "r-data") / "data" / "traces"
    assert {str(p.relative_to(shipped)): p.read_bytes() for p in shipped.rglob("*") if p.is_file()} == files
    for path in [shipped.parent, *shipped.rglob("*"), shipped]:
        assert oct(path.stat().st_mode & 0o777) == ("0o700" if path.is_dir() else "0o600"), path
    assert (data / "a.jsonl").stat().st_mode & 0o777 == 0o644                 # the user's own files keep theirs


def test_a_data_file_named_by_file_uri_or_tilde_goes_too_and_stores_and_hub_ids_stay(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "chat.jsonl").write_text(json.dumps({"text": "hi"}) + "\n")
    heads.prepare_bundle(tmp_path / "laptop", "r-data", {})
    for data in ("~/chat.jsonl", f"file://{tmp_path}/chat.jsonl"):
        assert ship_data(tmp_path / "laptop", "r-data", data) == "~/.yeto/head/data/chat.jsonl"
    assert (heads.bundle_dir(tmp_path / "laptop", "r-data") / "data" / "chat.jsonl").read_text() == '{"text": "hi"}\n'
    for data in ("s3://bucket/chat.jsonl", "gs://b/x", "org/chat-traces", ""):
        assert ship_data(tmp_path / "laptop", "r-data", data) == data
    assert sorted(p.name for p in (heads.bundle_dir(tmp_path / "laptop", "r-data") / "data").iterdir()) == ["chat.jsonl"]


@pytest.mark.parametrize("output, package", [
    ("s3://bucket/runs", "s3fs"), ("r2://bucket/runs", "s3fs"), ("gs://bucket/runs", "gcsfs"),
    ("gcs://bucket/runs", "gcsfs"), ("az://container/runs", "adlfs"), ("abfs://container/runs", "adlfs"),
    ("hf://org/repo", None), ("/data/runs", None), ("", None),
])
def test_the_heads_setup_installs_the_store_package_its_output_needs(tmp_path, output, package):
    lines = head_setup(output).splitlines()
    assert lines[: len(setup_script("cpu").splitlines())] == setup_script("cpu").splitlines()   # torch, Yeto first
    extra = lines[len(setup_script("cpu").splitlines()):]
    assert extra == ([f"python3 -m pip install -q {package}"] if package else [])
    assert head_task("r1", tmp_path, output=output).setup == head_setup(output)


def test_a_cloud_parents_base_is_compared_by_the_name_the_user_gave_not_the_heads_copy():
    from yeto.cli.launch.lineage import parent_key

    key = {"base_model": "~/.yeto/head/model/tiny", "base_files": "d" * 64}
    manifest = {"resume": {"key": key}, "provenance": {"base": {"id": "/home/u/models/tiny", "files": {}}}}
    assert parent_key(manifest) == {"base_model": "/home/u/models/tiny", "base_files": "d" * 64}
    local = {"resume": {"key": {**key, "base_model": "./tiny"}}, "provenance": manifest["provenance"]}
    assert parent_key(local)["base_model"] == "./tiny"          # a local parent's key is what it says
