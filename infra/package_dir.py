"""The folder-to-package mapping, read from pyproject.toml's package-dir (its one statement) by whoever needs it.

`[tool.setuptools] package-dir` installs the repository's top-level folders as `yeto.*` (schemas/ as yeto.schemas,
...). Tests and scripts read it from a checkout with `package_dir(root)`. A running Yeto asks `source_folders()`,
which holds wherever Yeto is installed:
- an editable install (`make setup`, the cloud head's `pip install -e`) leaves each folder in the checkout and
  loads it through setuptools' import hook, which no listing (pkgutil) can see into; the checkout's pyproject.toml,
  beside yeto/, names the packages;
- a wheel copies every mapped folder under yeto/ (site-packages/yeto/schemas/, ...) and brings no pyproject.toml:
  the `yeto` folder alone holds the whole tree.
Either way each package's folder comes from the import system (`find_spec`), so what is listed is what Python loads.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:   # Python 3.10: the same parser as a package (a dependency there only)
    import tomli as tomllib


def _pyproject(root: Path) -> dict[str, Any]:
    with open(root / "pyproject.toml", "rb") as f:
        table: dict[str, Any] = tomllib.load(f)
    return table


def package_dir(root: Path) -> dict[str, str]:
    """Each package name pyproject.toml under `root` maps, and its folder relative to `root`."""
    return dict(_pyproject(root)["tool"]["setuptools"]["package-dir"])


def listed_packages(root: Path) -> set[str]:
    """Every package pyproject.toml under `root` lists for setuptools to install."""
    return set(_pyproject(root)["tool"]["setuptools"]["packages"])


def _folder(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"{name} is not an installed package"
    return Path(next(iter(spec.submodule_search_locations)))


def source_folders() -> dict[str, Path]:
    """Each top-level yeto.* package of this interpreter's Yeto and the folder it loads from (see the module's doc)."""
    home = _folder("yeto")
    checkout = (home.parent / "pyproject.toml").is_file() and _pyproject(home.parent)["project"]["name"] == "yeto"
    names = package_dir(home.parent) if checkout else {"yeto": "yeto"}
    return {name: _folder(name) for name in sorted(names)}
