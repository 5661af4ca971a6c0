"""The code a manifest records is found from pyproject.toml's package-dir, not a copy of it: in this editable install
each yeto.* package loads from the folder package-dir names, a real wheel of the same sources loads them all from
yeto/, and the package hash of both is the same."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from yeto.infra.package_dir import package_dir, source_folders
from yeto.services.finalizer.provenance import code_version, source_digest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "yeto"
version = "0.0.1"

[tool.setuptools]
packages = ["yeto", "yeto.cli", "yeto.schemas", "yeto.infra"]
package-dir = { "yeto" = "yeto", "yeto.schemas" = "schemas", "yeto.infra" = "infra" }
"""


def test_an_editable_install_loads_each_package_from_the_folder_package_dir_names():
    assert source_folders() == {name: ROOT / folder for name, folder in package_dir(ROOT).items()}
    assert code_version()["package_sha256"] == source_digest(source_folders())


def _project(root: Path) -> Path:
    files = {"pyproject.toml": PYPROJECT, "yeto/__init__.py": "", "yeto/cli/__init__.py": "", "yeto/cli/main.py": "x = 1",
             "schemas/__init__.py": "", "schemas/events.py": "y = 2", "infra/__init__.py": "",
             "infra/package_dir.py": (ROOT / "infra" / "package_dir.py").read_text()}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_a_wheel_loads_every_package_from_yeto_and_hashes_like_the_checkout(tmp_path):
    checkout = _project(tmp_path / "checkout")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(checkout)], check=True, capture_output=True, timeout=120)
    site = tmp_path / "site"
    zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl"))).extractall(site)
    # -S (no site-packages) and a cwd away from the checkout: only the wheel's `yeto` can answer.
    probe = "import json, sys; from yeto.infra.package_dir import source_folders; print(json.dumps({k: str(v) " \
            "for k, v in source_folders().items()}))"
    done = subprocess.run([sys.executable, "-S", "-c", probe], env={"PYTHONPATH": str(site)}, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=True)
    folders = {name: Path(folder) for name, folder in json.loads(done.stdout).items()}
    assert folders == {"yeto": site / "yeto"}
    assert source_digest(folders) == source_digest({n: checkout / f for n, f in package_dir(checkout).items()})


def test_the_package_hash_names_modules_so_a_change_or_a_move_changes_it(tmp_path):
    checkout = _project(tmp_path)
    folders = {n: checkout / f for n, f in package_dir(checkout).items()}
    before = source_digest(folders)
    (checkout / "schemas" / "events.py").write_text("y = 3")
    changed = source_digest(folders)
    (checkout / "schemas" / "events.py").rename(checkout / "schemas" / "moved.py")
    assert len({before, changed, source_digest(folders)}) == 3
