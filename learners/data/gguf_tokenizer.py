"""A GGUF model's tokenizer, derived once through transformers and kept as a tokenizer folder in a cache.

transformers derives a GGUF's tokenizer by walking all of the file's metadata, twice, on every load (about 10 s for
the bundled SmolLM2 on an idle 2-core machine, several times that under load); the folder it saves loads in a fraction
of a second, without torch through tokenizer_files.py or through transformers (learners/torch/model.py). The folder
lies under $YETO_HOME/cache/tokenizers/ (default ~/.yeto/...), named by the sha256 of the GGUF's metadata bytes
(gguf_header.py: where its tokenizer and chat template live) and the transformers and tokenizers versions that
derived it, so a changed file or an upgrade derives it again and copies of one file share it.

A folder is written under a temporary name and renamed into place, so no reader sees half of one. Its manifest holds
every file's sha256; a folder whose entries differ from it (a torn write, an edited or truncated file, a stray or
linked file, another key) is removed and derived again from the GGUF, never read. The manifest catches corruption,
not someone who can write the user's home (and with it the venv); what a folder holds is read as untrusted input all
the same: JSON, the Rust tokenizer's parser, the chat template in a sandboxed Jinja.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path

from yeto.learners.data.gguf_header import metadata_digest

FORMAT = 1                     # this folder layout; a new one derives every folder again
MANIFEST = "manifest.json"
MAX_FILE_BYTES = 64 << 20      # a tokenizer.json of a 256k vocabulary is ~20 MB


def cache_root() -> Path:
    return Path(os.environ.get("YETO_HOME") or Path.home() / ".yeto").expanduser() / "cache" / "tokenizers"


def cache_key(source) -> str | None:
    """The folder name for a resolved GGUF source; None where it is no GGUF or its metadata cannot be walked."""
    if source.gguf_file is None or (digest := metadata_digest(Path(source.location) / source.gguf_file)) is None:
        return None
    derived_by = [FORMAT, digest, version("transformers"), version("tokenizers")]
    return hashlib.sha256(json.dumps(derived_by).encode()).hexdigest()[:40]


def cached_folder(source) -> Path | None:
    """The checked tokenizer folder derived from the source's GGUF; None: not derived yet, or refused and removed."""
    if (key := cache_key(source)) is None or not (folder := cache_root() / key).is_dir():
        return None
    if _intact(folder, key):
        return folder
    _remove(folder)
    return None


def store(source, tokenizer) -> Path | None:
    """Saves `tokenizer`, transformers' read of the source's GGUF, as its cached folder. None where no folder can be
    written (a read-only home): each load then reads the GGUF, as without the cache."""
    if (key := cache_key(source)) is None:
        return None
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    except OSError:
        return None
    try:
        tokenizer.save_pretrained(str(work))
        files = {p.name: _sha256(p) for p in sorted(work.iterdir())}
        (work / MANIFEST).write_text(json.dumps({"key": key, "files": files}, indent=1), encoding="utf-8")
        try:
            os.rename(work, root / key)
        except OSError:          # a folder is there: another process's (the same as this one), or a refused one
            if not _intact(root / key, key):
                _remove(root / key)
                os.rename(work, root / key)
    except OSError:              # a full disk, a folder that will not go: this load reads the GGUF, as before
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return root / key if _intact(root / key, key) else None


def _intact(folder: Path, key: str) -> bool:
    try:
        entries = {p.name: p for p in folder.iterdir()}
        if MANIFEST not in entries or not all(map(_plain_file, entries.values())):
            return False
        manifest = json.loads(entries[MANIFEST].read_bytes())
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, dict) or manifest.get("key") != key or set(entries) != {*files, MANIFEST}:
            return False
        return all(_sha256(entries[name]) == digest for name, digest in files.items())
    except (OSError, ValueError):
        return False


def _plain_file(path: Path) -> bool:
    return not path.is_symlink() and path.is_file() and path.stat().st_size <= MAX_FILE_BYTES


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _remove(folder: Path) -> None:
    """Moves the folder aside first, so a reader meets all of it or none of it."""
    aside = folder.with_name(f".{folder.name}.{os.getpid()}.removed")
    try:
        os.rename(folder, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)
