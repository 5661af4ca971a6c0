"""Where a run's output folder and its files are, as `yeto verify` and `yeto merge` are given them: the output folder
(schemas/artifact_layout.py), its `artifact/`, a flat folder finalized before the layout, or a copy of `artifact/`
alone (an hf:// output's repo, services/finalizer/output.py:hub_files)."""
from __future__ import annotations

from pathlib import Path

from yeto.schemas.artifact_layout import DEPLOY, deploy_copy_names

MANIFEST = "manifest.json"


def manifest_folder(given: Path) -> Path:
    """The folder whose manifest signs `given`: itself, or for `<output>/artifact` the output folder above it."""
    if given.name == DEPLOY and not (given / MANIFEST).is_file() and (given.parent / MANIFEST).is_file():
        return given.parent
    return given


def placed(folder: Path, files: dict) -> tuple[dict[str, str], list[str]]:
    """(manifest name -> its path in `folder`, names the folder leaves out by design) for a copy of `artifact/` alone
    (output.hub_files: no `artifact/` folder, the deployable files at its top; it holds no resume state), else
    ({}, []): every name where the manifest says."""
    copy = deploy_copy_names(files)
    if copy and not (folder / DEPLOY).is_dir() and any((folder / n).is_file() for n in copy.values()):
        return copy, sorted(n for n in files if n not in copy)
    return {}, []


def locate(given: Path) -> tuple[Path, Path]:
    """(the folder whose manifest to check, the adapter's folder) for a run's output folder, its `artifact/`
    (schemas/artifact_layout.py), a copy of `artifact/` alone, or a flat folder (finalized before `artifact/`, or a
    bare adapter)."""
    if (given / DEPLOY / "adapter_config.json").exists():
        return given, given / DEPLOY
    return manifest_folder(given), given
