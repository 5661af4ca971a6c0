"""What a cloud run's head gets from this machine besides its credentials: a local --data, a local --model and a
--resume-from/--branch-from parent artifact, copied into the head's bundle (folders 0700, files 0600, like
everything in the bundle) under `data/`, `model/` and `parent/`. The head's launcher can mount on the islands only
what exists on the head, and its syncer reads the parent there, so the recipe names each at the head's path. A store
URI, a Hub id or a model alias stays as it is: each learner reads it where it runs."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from yeto.infra.head.records import HEAD_STATE, bundle_dir
from yeto.infra.model_source import SMOLLM2_ALIASES
from yeto.schemas.artifact_layout import is_resume_file
from yeto.schemas.model_table import by_alias


def local_data(data: str) -> Path | None:
    """The local file or folder `data` names (a path, `~/...` or `file://...`), or None for a URI or a Hub id."""
    if not data or ("://" in data and not data.startswith("file://")):
        return None
    path = Path(data.removeprefix("file://")).expanduser()
    return path if path.exists() else None


def local_model(model: str) -> Path | None:
    """The local model folder or .gguf file `model` names (model_source.resolve's reading), or None for an alias
    (the bundled SmolLM2's GGUF comes with a package every island installs) or a Hub id."""
    if not model or model.lower() in SMOLLM2_ALIASES or by_alias(model) is not None:
        return None
    path = Path(model).expanduser()
    return path if path.is_dir() or (model.endswith(".gguf") and path.is_file()) else None


def ship_data(state_dir: Path, run_id: str, data: str) -> str:
    """Copy a local --data into the run's head bundle; the path the head (and so the recipe) names it by, under
    the head's state dir. Anything else is returned unchanged."""
    source = local_data(data)
    return data if source is None else _ship(state_dir, run_id, "data", source)


def ship_model(state_dir: Path, run_id: str, model: str) -> str:
    """Copy a local --model folder (hidden entries left out: a download's cache, as the pins leave them out) or
    .gguf file into the head bundle's `model/`; its head-side path. An alias or a Hub id is returned unchanged.
    The launch's pins name files relative to the folder (or by the file's name), so they hold at the new place."""
    source = local_model(model)
    return model if source is None else _ship(state_dir, run_id, "model", source,
                                              keep=lambda rel: not any(p.startswith(".") for p in rel.parts))


def ship_parent(state_dir: Path, run_id: str, artifact: Path) -> str:
    """Copy what a resumed or branched run's syncer seeds from (the parent output folder's manifest.json and its
    `resume/` state, or a flat folder's resume.* files; not `artifact/`, the weights for people) into the head
    bundle's `parent/`; its head-side path."""
    return _ship(state_dir, run_id, "parent", Path(artifact),
                 keep=lambda rel: rel.as_posix() == "manifest.json" or is_resume_file(rel.as_posix()))


def _ship(state_dir: Path, run_id: str, kind: str, source: Path, keep: Callable[[Path], bool] = lambda rel: True) -> str:
    source = source.resolve()
    folder = bundle_dir(state_dir, run_id) / kind
    _private_dir(folder)
    dest = folder / source.name
    if source.is_dir():
        _private_dir(dest)
        for path in sorted(source.rglob("*")):
            rel = path.relative_to(source)
            if not keep(rel):
                continue
            if path.is_dir():
                _private_dir(dest / rel)
            elif path.is_file():
                _private_dir((dest / rel).parent)
                _copy_private(path, dest / rel)
    else:
        _copy_private(source, dest)
    return f"{HEAD_STATE}/{kind}/{source.name}"


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def _copy_private(source: Path, dest: Path) -> None:
    """Created 0600 before a byte is written: never readable by others, even for a moment."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    os.chmod(dest, 0o600)
