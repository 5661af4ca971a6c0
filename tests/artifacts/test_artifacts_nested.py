"""An artifact folder with subfolders (the deployable files in one, the resume state in another) travels whole:
`deliver` copies and uploads every file under its relative path, and `yeto pull`'s fetch from a head carries the
subfolders; a head whose manifest names a path out of the folder gets nothing written (real nats-server)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import fsspec
import pytest

from yeto.infra.head import artifact_files
from yeto.schemas.subjects import CHUNK_BYTES, artifact_subject
from yeto.services.finalizer.output import deliver, files

pytestmark = pytest.mark.timeout(60)
NESTED = {"artifact/adapter_model.safetensors": os.urandom(2 * CHUNK_BYTES + 7), "artifact/README.md": b"# card",
          "resume/frag-0.safetensors": os.urandom(CHUNK_BYTES + 1)}


def _folder(root: Path, bodies: dict[str, bytes]) -> str:
    """The files, and a manifest naming them by relative path; returns the manifest's sha256."""
    root.mkdir(parents=True)
    for name, body in bodies.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)
    text = json.dumps({"files": {n: hashlib.sha256(b).hexdigest() for n, b in bodies.items()}}).encode()
    (root / "manifest.json").write_bytes(text)
    return hashlib.sha256(text).hexdigest()


def test_deliver_copies_and_uploads_the_subfolders(tmp_path):
    art = tmp_path / "art"
    _folder(art, NESTED)
    assert files(art) == sorted([*NESTED, "manifest.json"])
    where, uploaded = deliver(art, str(tmp_path / "out"))
    assert not uploaded and files(Path(where)) == files(art)
    assert all((Path(where) / n).read_bytes() == body for n, body in NESTED.items())
    assert deliver(art, "memory://bucket/nested") == ("memory://bucket/nested", True)
    memory = fsspec.filesystem("memory")
    assert all(memory.cat_file(f"/bucket/nested/{n}") == body for n, body in NESTED.items())



async def test_the_pull_fetches_subfolders_from_the_head(bus, tmp_path, run_id):
    head, dest = tmp_path / "head", tmp_path / "laptop" / "artifact"
    sha = _folder(head / "runs" / run_id / "artifact", NESTED)
    sub = await artifact_files.serve(bus, head, run_id)
    try:
        manifest = await artifact_files.fetch(bus, run_id, dest, sha)
        assert set(manifest["files"]) == set(NESTED)
        assert files(dest) == sorted([*NESTED, "manifest.json"])
        assert all((dest / n).read_bytes() == body for n, body in NESTED.items())
        for name in ("artifact/../../../stack.json", "artifact//README.md", "./artifact/README.md", "artifact\\README.md"):
            reply = await bus.request(artifact_subject(run_id), json.dumps({"file": name, "offset": 0}).encode(),
                                      timeout_s=10)
            assert reply == b"", name
    finally:
        await sub.close()


@pytest.mark.parametrize("name", ["../outside.txt", "artifact/../../outside.txt", "/tmp/outside.txt", "a\\..\\b"])
async def test_a_manifest_naming_a_path_out_of_the_folder_gets_nothing_written(bus, tmp_path, run_id, name):
    text = json.dumps({"files": {name: hashlib.sha256(b"x").hexdigest()}}).encode()

    async def hostile(payload: bytes) -> bytes:       # a head that serves whatever it likes
        req = json.loads(payload)
        if req.get("sizes"):
            return json.dumps({"manifest.json": len(text), name: 1}).encode()
        return (text if req["file"] == "manifest.json" else b"x")[req["offset"]:][:CHUNK_BYTES]

    sub = await bus.serve(artifact_subject(run_id), hostile)
    dest = tmp_path / "laptop" / "runs" / "r" / "artifact"
    try:
        with pytest.raises(ValueError, match="not a relative path inside the artifact folder"):
            await artifact_files.fetch(bus, run_id, dest, hashlib.sha256(text).hexdigest())
    finally:
        await sub.close()
    assert not dest.exists() and files(tmp_path) == []
