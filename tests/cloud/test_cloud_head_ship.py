"""What a cloud run's head gets besides its credentials: a local --data (file or folder) copied into the head's
bundle, private, named at the head's path (a store URI or a Hub id unchanged); and the store package its finalizer
uploads --output with, installed by the head's setup (offline: the setup text, per scheme)."""
from __future__ import annotations

import json

import pytest

from yeto.infra import heads
from yeto.infra.head_data import ship_data
from yeto.services.launcher.backends.sky_tasks import head_setup, head_task, setup_script


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
