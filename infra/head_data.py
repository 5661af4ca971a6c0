"""A cloud run's local --data, shipped to its head inside the head's bundle: the head's launcher can mount on the
islands only what exists on the head, so a file or folder of this machine goes to `bundle/data/<name>` (folders
0700, files 0600, like everything in the bundle) and the recipe names it at the head's path. A store URI or a Hub
dataset id stays as it is: each learner reads it where it runs."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from yeto.infra.heads import HEAD_STATE, bundle_dir


def local_data(data: str) -> Path | None:
    """The local file or folder `data` names (a path, `~/...` or `file://...`), or None for a URI or a Hub id."""
    if not data or ("://" in data and not data.startswith("file://")):
        return None
    path = Path(data.removeprefix("file://")).expanduser()
    return path if path.exists() else None


def ship_data(state_dir: Path, run_id: str, data: str) -> str:
    """Copy a local --data into the run's head bundle; the path the head (and so the recipe) names it by, under
    the head's state dir. Anything else is returned unchanged."""
    source = local_data(data)
    if source is None:
        return data
    source = source.resolve()
    folder = bundle_dir(state_dir, run_id) / "data"
    _private_dir(folder)
    dest = folder / source.name
    if source.is_dir():
        _private_dir(dest)
        for path in sorted(source.rglob("*")):
            target = dest / path.relative_to(source)
            if path.is_dir():
                _private_dir(target)
            elif path.is_file():
                _copy_private(path, target)
    else:
        _copy_private(source, dest)
    return f"{HEAD_STATE}/data/{source.name}"


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def _copy_private(source: Path, dest: Path) -> None:
    """Created 0600 before a byte is written: never readable by others, even for a moment."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    os.chmod(dest, 0o600)
