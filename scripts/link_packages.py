"""Build build/links/yeto: pyproject.toml's package-dir mapping as folder links that mypy and pyright can follow.

Type checkers resolve `yeto.schemas` by looking for yeto/schemas/ on their search path; they cannot remap names
the way setuptools' package-dir does, and the editable install's import hook is invisible to them. This tree
links each mapped folder (and each entry of yeto/) where the name says, so `mypy_path = "build/links"` resolves
every `yeto.*` import to the file in the repository. Folders are linked whole: a module added later appears at
once; only a new entry directly in yeto/ needs a rerun (`make lint` reruns it).
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from yeto.infra.package_dir import package_dir

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path = ROOT, out: Path | None = None) -> Path:
    out = out or root / "build" / "links"
    mapping = package_dir(root)
    shutil.rmtree(out, ignore_errors=True)
    top = out / "yeto"
    top.mkdir(parents=True)
    for entry in sorted((root / mapping["yeto"]).iterdir()):
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(os.path.relpath(entry, top))
    for name, folder in sorted(mapping.items()):
        if name != "yeto":
            link = out.joinpath(*name.split("."))
            link.symlink_to(os.path.relpath(root / folder, link.parent), target_is_directory=True)
    return out


if __name__ == "__main__":
    print(build(), file=sys.stderr)
