"""The cache of a GGUF's tokenizer (infra/gguf_tokenizer.py, gguf_header.py): keyed by the file's metadata
bytes and not its weights, written whole or not at all, and a folder that differs from its manifest in any way is
removed and never read. The bundled SmolLM2's tokenizer through it: tests/learner/test_learner_gguf_tokenizer.py."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import PLAIN_TEMPLATE, make_tokenizer
from yeto.infra.gguf_header import metadata_digest
from yeto.infra.gguf_tokenizer import MANIFEST, cache_root, cached_folder, store
from yeto.infra.model_source import ModelSource
from yeto.learners.data.tokenizer_files import read_tokenizer


def tiny_gguf(path: Path, *, template: str = "{{ messages }}", weights: float = 1.0) -> Path:
    """A GGUF v3 with a small vocabulary (string array), a chat template and one tensor."""
    from gguf import GGUFWriter
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["<s>", "a", "b", "ab"])
    w.add_token_types([3, 1, 1, 1])
    w.add_chat_template(template)
    w.add_tensor("token_embd.weight", np.full((4, 8), weights, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("YETO_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_digest_covers_the_metadata_and_not_the_weights(tmp_path):
    base = metadata_digest(tiny_gguf(tmp_path / "a.gguf"))
    assert base is not None and len(base) == 64
    assert metadata_digest(tiny_gguf(tmp_path / "b.gguf", weights=2.0)) == base
    assert metadata_digest(tiny_gguf(tmp_path / "c.gguf", template="{{ other }}")) != base


def test_digest_refuses_files_it_cannot_walk(tmp_path):
    good = tiny_gguf(tmp_path / "good.gguf").read_bytes()
    first_key = struct.unpack_from("<Q", good, 24)[0]
    cases = {"truncated": good[:60], "not_gguf": b"GGML" + good[4:], "version_1": good[:4] + b"\1\0\0\0" + good[8:],
             "key_past_the_end": good[:24] + struct.pack("<Q", 1 << 40) + good[32:],
             "unknown_type": good[:32 + first_key] + struct.pack("<I", 77) + good[36 + first_key:], "empty": b""}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert metadata_digest(tmp_path / name) is None, name
    assert metadata_digest(tmp_path / "missing.gguf") is None


def test_a_stored_folder_is_read_back_without_transformers_under_the_gguf_name(tmp_path, home):
    source = ModelSource(location=str(tmp_path), gguf_file=tiny_gguf(tmp_path / "m.gguf").name)
    assert cached_folder(source) is None and read_tokenizer(source) is None
    folder = store(source, make_tokenizer(PLAIN_TEMPLATE))
    assert folder is not None and folder.parent == cache_root() == home / "cache" / "tokenizers"
    assert cached_folder(source) == folder and [p.name for p in folder.parent.iterdir()] == [folder.name]
    found = read_tokenizer(source)
    assert found is not None and found.name_or_path == str(tmp_path) and found.chat_template == PLAIN_TEMPLATE
    assert store(source, make_tokenizer(PLAIN_TEMPLATE)) == folder          # a second writer finds it and leaves it
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]      # no temporary folder left behind
    tiny_gguf(tmp_path / "m.gguf", template="{{ changed }}")                # a changed GGUF: another key, not derived yet
    assert cached_folder(source) is None and read_tokenizer(source) is None


def _edit_token(folder: Path) -> None:
    path = folder / "tokenizer.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"<|im_end|>"', '"<|im_END|>"'), encoding="utf-8")


def _other_key(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "key": "0" * 40}))


def _linked(folder: Path) -> None:
    outside = folder.parent.parent / "template.jinja"
    outside.write_bytes((folder / "chat_template.jinja").read_bytes())      # the same bytes, through a link
    (folder / "chat_template.jinja").unlink()
    (folder / "chat_template.jinja").symlink_to(outside)


CORRUPTIONS = {
    "edited_token": _edit_token,
    "truncated": lambda f: os.truncate(f / "tokenizer.json", 100),
    "no_manifest": lambda f: (f / MANIFEST).unlink(),
    "manifest_not_json": lambda f: (f / MANIFEST).write_text("{"),
    "manifest_a_list": lambda f: (f / MANIFEST).write_text("[]"),
    "stray_file": lambda f: (f / "special_tokens_map.json").write_text("{}"),
    "missing_file": lambda f: (f / "chat_template.jinja").unlink(),
    "other_key": _other_key,
    "linked_file": _linked,
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_folder_that_differs_from_its_manifest_is_removed_and_derived_again(tmp_path, home, corrupt):
    source = ModelSource(location=str(tmp_path), gguf_file=tiny_gguf(tmp_path / "m.gguf").name)
    folder = store(source, make_tokenizer(PLAIN_TEMPLATE))
    corrupt(folder)
    assert read_tokenizer(source) is None and not folder.exists()
    assert store(source, make_tokenizer(PLAIN_TEMPLATE)) == folder and read_tokenizer(source) is not None


def test_an_unwritable_cache_leaves_the_tokenizer_to_the_gguf(tmp_path, monkeypatch):
    (tmp_path / "home").write_text("a file, not a folder")
    monkeypatch.setenv("YETO_HOME", str(tmp_path / "home"))
    source = ModelSource(location=str(tmp_path), gguf_file=tiny_gguf(tmp_path / "m.gguf").name)
    assert store(source, make_tokenizer(PLAIN_TEMPLATE)) is None and read_tokenizer(source) is None


def _store_after(barrier, source, tokenizer, results) -> None:
    barrier.wait()
    results.put(str(store(source, tokenizer)))


def test_writers_racing_for_one_folder_leave_it_whole(tmp_path, home):
    import multiprocessing
    source = ModelSource(location=str(tmp_path), gguf_file=tiny_gguf(tmp_path / "m.gguf").name)
    tokenizer, ctx = make_tokenizer(PLAIN_TEMPLATE), multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    writers = [ctx.Process(target=_store_after, args=(barrier, source, tokenizer, results)) for _ in range(3)]
    for w in writers:
        w.start()
    found = {results.get(timeout=120) for _ in writers}
    for w in writers:
        w.join(timeout=60)
    folder = cached_folder(source)
    assert folder is not None and found == {str(folder)} and [w.exitcode for w in writers] == [0, 0, 0]
    assert [p.name for p in cache_root().iterdir()] == [folder.name]       # the losers' temporary folders are gone
