"""What a run pins at launch and what an island checks before it trains: the base model and the dataset, each by
its Hub commit hash or by the sha256 of its local files (one record each, carried in the recipe as `pins`).

A pin is {"id"/"source": the name as given, "revision": a Hub commit hash or None, "files": {name: sha256}}.
A Hub commit hash names exact file contents (git addresses them; LFS pointers carry each weight's sha256), so
islands load that commit and re-hash nothing; a local model or data folder, or a .gguf file, is re-hashed by
every island and compared with the launch's hashes. A shared edge like model_source.py: learners read it.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from yeto.infra.model_source import ModelSource, resolve

# What transformers reads from a model folder (weights, config, tokenizer, chat template); README.md and the
# like are not pinned, so editing them refuses nothing.
MODEL_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json", ".model", ".txt", ".tiktoken", ".jinja")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_files(path: Path, *, model: bool) -> dict[str, str]:
    """{name relative to `path`: sha256} of a file, or of a folder's files (a model folder: its top level, the
    suffixes transformers reads; a data folder: every file), hidden ones left out."""
    if path.is_file():
        return {path.name: sha256_file(path)}
    found = sorted(path.iterdir()) if model else sorted(path.rglob("*"))
    return {str(p.relative_to(path)): sha256_file(p) for p in found
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            and (not model or p.suffix in MODEL_SUFFIXES)}


def _hub_model(repo: str) -> tuple[str, dict[str, str]]:
    """(commit hash, {weight file: sha256}) of a Hub model's current revision; offline, the cached snapshot's."""
    from huggingface_hub import HfApi, constants, snapshot_download
    try:
        if constants.HF_HUB_OFFLINE:    # the cache's snapshot folder is named by its commit hash
            folder = Path(snapshot_download(repo, local_files_only=True))
            return folder.name, local_files(folder, model=True)
        info = HfApi().model_info(repo, files_metadata=True)
    except Exception as e:  # noqa: BLE001 - offline, gated, missing: the user fixes each, and the message says how
        offline = " (HF_HUB_OFFLINE is set and the model is not in this machine's Hugging Face cache)" \
            if constants.HF_HUB_OFFLINE else ""
        raise ValueError(f"--model {repo}: could not pin its Hub revision to a commit hash{offline} "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); every island must load "
                         "the same weights, so Yeto pins them before renting: check the id, the network and HF_TOKEN, "
                         "or pass a local model folder or .gguf file") from None
    files = {s.rfilename: s.lfs.sha256 for s in info.siblings or [] if s.lfs is not None and "/" not in s.rfilename}
    return str(info.sha), files


def pin_model(name: str) -> dict[str, Any]:
    """The base model's pin: a Hub id resolved to its commit hash, a local folder or .gguf file by sha256."""
    source = resolve(name)
    if source.gguf_file is not None:
        return {"id": name, "revision": None, "files": local_files(Path(source.location) / source.gguf_file, model=True)}
    if source.is_local:
        return {"id": name, "revision": None, "files": local_files(Path(source.location), model=True)}
    revision, files = _hub_model(source.location)
    return {"id": name, "revision": revision, "files": files}


def pin_data(data: str, revision: str | None) -> dict[str, Any]:
    """The dataset's pin: a Hub dataset by the commit its check resolved, a local file or folder by sha256; an
    object-store URI by neither (its rows' fingerprint is recorded, not checked by islands)."""
    path = Path(data.removeprefix("file://")).expanduser()
    files = local_files(path, model=False) if revision is None and "://" not in data.replace("file://", "") \
        and path.exists() else {}
    return {"source": data, "revision": revision, "files": files}


def _differences(what: str, where: str, got: dict[str, str], want: dict[str, str]) -> list[str]:
    changed = [f"{what} file {where}/{n} has sha256 {got[n][:12]}, launch pinned {want[n][:12]}"
               for n in sorted(want) if n in got and got[n] != want[n]]
    missing = [f"{what} file {where}/{n} is missing (launch pinned it)" for n in sorted(set(want) - set(got))]
    extra = [f"{what} file {where}/{n} was not there at launch" for n in sorted(set(got) - set(want))]
    return changed + missing + extra


def pinned_source(model: str, pin: dict[str, Any] | None) -> ModelSource:
    """The base model an island loads: at the pinned Hub commit, or local files checked against the pin.
    Raises ValueError naming each file that differs (the island then refuses to train)."""
    source = resolve(model)
    if not pin:
        return source
    if pin.get("revision"):
        return ModelSource(location=source.location, gguf_file=source.gguf_file, revision=pin["revision"])
    path = Path(source.location) / source.gguf_file if source.gguf_file else Path(source.location)
    problems = _differences("base model", str(path.parent if source.gguf_file else path),
                            local_files(path, model=True), pin.get("files", {}))
    if problems:
        raise ValueError("refusing a base model other than the one the run pinned: " + "; ".join(problems))
    return source


def check_data_pin(data: str, pin: dict[str, Any] | None) -> None:
    """Raise ValueError naming each local data file that differs from the launch's pin."""
    if not pin or not pin.get("files"):
        return
    path = Path(data.removeprefix("file://")).expanduser()
    got = local_files(path, model=False) if path.exists() else {}
    problems = _differences("data", str(path.parent if path.is_file() else path), got, pin["files"])
    if problems:
        raise ValueError("refusing data other than the data the run pinned: " + "; ".join(problems))
