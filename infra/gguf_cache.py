"""Folders derived once from a GGUF file (its tokenizer, its model as safetensors) and kept in a checked cache.

A folder lies under $YETO_HOME/cache/<kind>/ (default ~/.yeto/...), named by a key the caller derives from the
GGUF and the library versions that derived it, so a changed file or an upgrade derives it again and copies of one
file share it. It is written under a temporary name and renamed into place, so no reader sees half of one. Its
manifest holds every file's sha256; a folder whose entries differ from it (a torn write, an edited or truncated
file, a stray or linked file, another key) is removed and derived again from the GGUF, never read. The manifest
catches corruption, not someone who can write the user's home (and with it the venv); what a folder holds is read
as untrusted input all the same.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

MANIFEST = "manifest.json"
DERIVE_WAIT_S = 300.0
"""How long a load waits for another process deriving the same folder (the SmolLM2-135M Q4_1 model: 71 s at a load
of 14 on the 2-core box) before it derives the folder itself, as it did before it waited."""


class FolderCache:
    """One kind of derived folder: `key` names a source's folder (None: not a GGUF, or not readable)."""

    def __init__(self, kind: str, key: Callable[[object], str | None], *, max_file_bytes: int) -> None:
        self.kind, self.key, self.max_file_bytes = kind, key, max_file_bytes

    def root(self) -> Path:
        return Path(os.environ.get("YETO_HOME") or Path.home() / ".yeto").expanduser() / "cache" / self.kind

    def cached_folder(self, source) -> Path | None:
        """The checked folder derived from the source's GGUF; None: not derived yet, or refused and removed."""
        if (key := self.key(source)) is None or not (folder := self.root() / key).is_dir():
            return None
        if self._intact(folder, key):
            return folder
        _remove(folder)
        return None

    @contextlib.contextmanager
    def deriving(self, source, wait_s: float = DERIVE_WAIT_S) -> Iterator[None]:
        """Held around a load that reads the cached folder or derives and stores it: the islands of one host start
        together, and each derived the same folder beside the others (a dequantization's CPU paid once per island on
        the first run); one derives it while the others wait, then they read its folder. An exclusive flock on
        `.<key>.lock` beside the folders, let go when its holder ends, however it ends. Bounded: a holder that takes
        longer than `wait_s` (stopped, or far slower) is not waited for; this load then derives it itself."""
        if (key := self.key(source)) is None:
            yield
            return
        try:
            root = self.root()
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(root / f".{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:              # a read-only home: no cache to share either
            yield
            return
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.2)
            yield
        finally:
            os.close(fd)             # the lock goes with the descriptor

    def store(self, source, save: Callable[[Path], None]) -> Path | None:
        """`save(folder)` writes what was derived from the source's GGUF; it becomes the source's cached folder.
        None where no folder can be written (a read-only home, a full disk): each load then reads the GGUF."""
        if (key := self.key(source)) is None:
            return None
        root = self.root()
        try:
            root.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        except OSError:
            return None
        try:
            save(work)
            files = {p.name: _sha256(p) for p in sorted(work.iterdir())}
            (work / MANIFEST).write_text(json.dumps({"key": key, "files": files}, indent=1), encoding="utf-8")
            try:
                os.rename(work, root / key)
            except OSError:          # a folder is there: another process's (the same as this one), or a refused one
                if not self._intact(root / key, key):
                    _remove(root / key)
                    os.rename(work, root / key)
        except OSError:              # a full disk, a folder that will not go: this load reads the GGUF, as before
            return None
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return root / key if self._intact(root / key, key) else None

    def _intact(self, folder: Path, key: str) -> bool:
        try:
            entries = {p.name: p for p in folder.iterdir()}
            if MANIFEST not in entries or not all(map(self._plain_file, entries.values())):
                return False
            manifest = json.loads(entries[MANIFEST].read_bytes())
            files = manifest.get("files") if isinstance(manifest, dict) else None
            if not isinstance(files, dict) or manifest.get("key") != key or set(entries) != {*files, MANIFEST}:
                return False
            return all(_sha256(entries[name]) == digest for name, digest in files.items())
        except (OSError, ValueError):
            return False

    def _plain_file(self, path: Path) -> bool:
        return not path.is_symlink() and path.is_file() and path.stat().st_size <= self.max_file_bytes


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_digest(path: Path) -> str | None:
    """sha256 (hex) of the whole file; None where it cannot be read."""
    try:
        return _sha256(path)
    except OSError:
        return None


def _remove(folder: Path) -> None:
    """Moves the folder aside first, so a reader meets all of it or none of it."""
    aside = folder.with_name(f".{folder.name}.{os.getpid()}.removed")
    try:
        os.rename(folder, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)
