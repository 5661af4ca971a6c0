"""Deliver the artifact to `--output`: a local directory, any fsspec / SkyPilot store URI, or hf://org/repo.

Every upload is verified against the manifest (sizes, and the manifest read back byte-identical) before
the run is reported uploaded; a failed verification raises, and the finalizer retries. Files in subfolders go too,
under their relative paths (`files`). An hf:// repo is the deployable model: `artifact/` is its root, with the
manifest and its signature beside it; `resume/` stays in the run's local output folder (`hub_files`).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from yeto.infra.signing import SIG_FILE
from yeto.schemas.artifact_layout import deploy_copy_names
from yeto.services.finalizer.artifact import sha256_file

MANIFEST = "manifest.json"

# SkyPilot store schemes and their fsspec protocols (r2 and cos speak S3).
SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "abfs", "r2": "s3", "cos": "s3", "oci": "oci",
           "memory": "memory", "file": "file"}


class UploadError(RuntimeError):
    """The artifact did not arrive intact; the message says where and what differs."""


def files(local: Path) -> list[str]:
    """The artifact's files as relative POSIX paths, subfolders included, sorted."""
    return sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())


def is_remote(output: str) -> bool:
    return "://" in output


def deliver(local: Path, output: str) -> tuple[str, bool]:
    """Copy or upload `local` to `output`; returns (where it is, uploaded). Empty output: it stays in `local`."""
    if not output:
        return str(local), False
    if output.startswith("hf://"):
        _upload_hf(local, output[len("hf://"):])
        return output, True
    if is_remote(output):
        _upload_fsspec(local, output)
        return output, True
    dest = Path(output).expanduser().resolve()
    if dest != local.resolve():
        shutil.copytree(local, dest, dirs_exist_ok=True)
        for name in files(local):
            if not (dest / name).is_file() or sha256_file(dest / name) != sha256_file(local / name):
                raise UploadError(f"{dest / name} differs from the artifact after copying")
    return str(dest), False


def _upload_fsspec(local: Path, uri: str) -> None:
    import fsspec

    scheme = uri.split("://", 1)[0]
    if scheme not in SCHEMES:
        raise ValueError(f"--output {uri}: unknown store scheme {scheme!r}; use one of {', '.join(sorted(SCHEMES))}, "
                         f"hf://org/repo or a local path")
    fs, root = fsspec.core.url_to_fs(f"{SCHEMES[scheme]}://{uri.split('://', 1)[1]}")
    root = root.rstrip("/")
    names = files(local)
    for name in names:
        if "/" in name:
            fs.makedirs(f"{root}/{name.rsplit('/', 1)[0]}", exist_ok=True)
        fs.put_file(str(local / name), f"{root}/{name}")
    for name in names:
        remote = f"{root}/{name}"
        if not fs.exists(remote) or fs.size(remote) != (local / name).stat().st_size:
            raise UploadError(f"{uri}/{name} is missing or has the wrong size after upload")
    if fs.cat_file(f"{root}/{MANIFEST}") != (local / MANIFEST).read_bytes():
        raise UploadError(f"{uri}/manifest.json differs from the artifact's manifest after upload")


def hub_files(local: Path) -> dict[str, str]:
    """What an hf:// output uploads: its path in the repo -> its path in the output folder. `artifact/`'s files go
    to the repo's root (`from_pretrained("org/repo")` loads them), the manifest and its signature beside them; the
    resume state does not go (it is 2-3x the adapter, and `--resume-from` reads the run's local output folder).
    A flat folder (finalized before `artifact/`: ecdf685, a diffusion run's 677d304) goes as it is."""
    names = files(local)
    if not (deploy := deploy_copy_names(names)):
        return {name: name for name in names}
    return {**{there: here for here, there in deploy.items()},
            **{name: name for name in (MANIFEST, SIG_FILE) if name in names}}


def _upload_hf(local: Path, repo: str) -> None:
    from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

    api, plan = HfApi(), hub_files(local)
    api.create_repo(repo, private=True, exist_ok=True)
    api.create_commit(repo_id=repo, commit_message="yeto: final artifact",
                      operations=[CommitOperationAdd(path_in_repo=there, path_or_fileobj=str(local / here))
                                  for there, here in sorted(plan.items())])
    got = Path(hf_hub_download(repo, MANIFEST, force_download=True)).read_bytes()
    if got != (local / MANIFEST).read_bytes():
        raise UploadError(f"hf://{repo}/{MANIFEST} differs from the artifact's manifest after upload")
    remote = set(api.list_repo_files(repo))
    missing = [name for name in sorted(plan) if name not in remote]
    if missing:
        raise UploadError(f"hf://{repo} lacks {', '.join(missing)} after upload")
