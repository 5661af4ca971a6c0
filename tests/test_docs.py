"""The generated parts of the docs are current: README file tree and model table, the event catalogue."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _check(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--check"], cwd=ROOT, capture_output=True, text=True)


def test_readme_file_tree_and_event_catalogue_are_current():
    result = _check("gen_docs.py")
    assert result.returncode == 0, result.stderr


def test_every_file_in_the_readme_tree_says_what_it_is_for():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_docs

    silent = [str(p.relative_to(ROOT)) for p in gen_docs.tracked_files() if not gen_docs.describe(p)]
    assert not silent, f"give these files a first docstring line (or a heading): {silent}"


def test_readme_model_table_matches_the_alias_table():
    result = _check("gen_model_table.py")
    assert result.returncode == 0, result.stderr
