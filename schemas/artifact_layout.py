"""The run's output folder, as the finalizer writes it and every reader finds it: names only, no I/O.

    manifest.json, manifest.sig   every file below by its relative path and sha256, signed
    artifact/                     what a user deploys: the adapter (or full model), tokenizer, model card
    resume/                       what `--resume-from` / `--branch-from` need: the syncer's final fragments

A folder finalized before this layout (flat) holds the deployable files at its top and the resume state as
`resume.frag-<p>.safetensors` beside them; readers tell the two apart by the manifest's file names. A copy of
`artifact/` alone (an hf:// output's repo) holds the deployable files at its top beside the output folder's
manifest, which still names them `artifact/...` (`deploy_copy_names`).
"""
from __future__ import annotations

from collections.abc import Iterable

DEPLOY = "artifact"           # the deployable folder inside the output folder
RESUME = "resume"             # the resume state's folder inside the output folder
FLAT_RESUME_PREFIX = "resume."   # a flat (older) folder's resume files: resume.frag-<p>.safetensors


def resume_name(fragment_file: str) -> str:
    """Where a fragment snapshot (`frag-<p>.safetensors`) sits in the output folder."""
    return f"{RESUME}/{fragment_file}"


def deploy_name(name: str) -> str:
    """Where a deployable file (`adapter_model.safetensors`, `README.md`, ...) sits in the output folder."""
    return f"{DEPLOY}/{name}"


def is_resume_file(name: str) -> bool:
    """A manifest name of the resume state, in either layout."""
    return name.startswith(f"{RESUME}/") or (name.startswith(FLAT_RESUME_PREFIX) and "/" not in name)


def deploy_prefix(files: Iterable[str]) -> str:
    """`artifact/` when a manifest's files use this layout, "" for a flat folder (deployable files at the top)."""
    return f"{DEPLOY}/" if any(name.startswith(f"{DEPLOY}/") for name in files) else ""


def deploy_copy_names(files: Iterable[str]) -> dict[str, str]:
    """A manifest's deployable names -> where a copy of `artifact/` alone holds them (at its top); {} when flat."""
    return {name: name[len(DEPLOY) + 1:] for name in files if name.startswith(f"{DEPLOY}/")}
