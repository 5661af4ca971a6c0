"""The provenance section of an artifact's manifest: the base and data as launch pinned them, the fleet, the rounds
merged, and the code (Yeto's version, git commit, package hash) and libraries that made the artifact."""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

from yeto.infra.model_source import resolve
from yeto.infra.package_dir import source_folders
from yeto.infra.source_pins import pin_model
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.train_section import TrainSection

LIBRARIES = ("torch", "transformers", "peft", "safetensors", "tokenizers", "datasets", "huggingface_hub", "numpy",
             "accelerate", "bitsandbytes", "cryptography", "nats-py", "duckdb", "pydantic")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(root: Path, *argv: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source_digest(folders: dict[str, Path]) -> str:
    """sha256 over each module's dotted name and bytes, `folders` mapping package names to where they load from:
    keyed by module name, not by file path, so a wheel and an editable install of the same sources agree."""
    modules = {".".join((name, *f.relative_to(folder).with_suffix("").parts)): f
               for name, folder in folders.items() for f in folder.rglob("*.py") if "__pycache__" not in f.parts}
    digest = hashlib.sha256()
    for module, f in sorted(modules.items()):
        digest.update(f"{module}\0".encode() + f.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache    # once per process: the code does not change under a running finalizer
def code_version() -> dict[str, Any]:
    """Yeto's version, the sha256 of its Python sources (an installed wheel has no git), and the git commit
    with whether tracked files differ from it, when it runs from a checkout."""
    folders = source_folders()
    root = folders["yeto"].parent
    commit = _git(root, "rev-parse", "HEAD")
    dirty = None if commit is None else bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    return {"version": _version("yeto"), "git_commit": commit, "git_dirty": dirty,
            "package_sha256": source_digest(folders)}


def libraries() -> dict[str, str | None]:
    return {"python": platform.python_version(), **{name: _version(name) for name in LIBRARIES}}


def base_pin(train: TrainSection) -> dict[str, Any]:
    """The base as launch pinned it; a recipe without pins (an older run) is hashed now when the base is local."""
    if pin := train.pins.get("base"):
        return dict(pin)
    source = resolve(train.model)
    return pin_model(train.model) if source.is_local else {"id": train.model, "revision": None, "files": {}}


def data_record(recipe: LaunchRecipe) -> dict[str, Any]:
    check, pin = recipe.data_check, recipe.train.pins.get("data", {})
    return {"source": check.source if "source" in check.model_fields_set else recipe.train.data,
            "revision": check.revision, "fingerprint": check.fingerprint, "rows_used": check.num_rows - check.num_bad,
            "bad_rows_skipped": check.num_bad if check.on_bad_rows == "skip" else 0, "files": pin.get("files", {})}


def provenance(recipe: dict[str, Any] | LaunchRecipe, run: dict[str, Any]) -> dict[str, Any]:
    """The manifest's "provenance": `run` is the finalizer's summary (fleet, rounds_merged, learner_steps)."""
    typed = LaunchRecipe.upcast(recipe)
    return {"base": base_pin(typed.train), "data": data_record(typed), "fleet": run.get("fleet", []),
            "rounds_merged": run.get("rounds_merged", 0), "learner_steps": run.get("learner_steps", {}),
            "yeto": code_version(), "libraries": libraries()}
