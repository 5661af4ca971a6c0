"""`yeto --version`: the package version, and the git commit when yeto runs from a checkout."""
from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(where: Path) -> str | None:
    """The checkout's short commit (with `+dirty` when files changed), or None outside a git checkout."""
    if not any((p / ".git").exists() for p in (where, *where.parents)):
        return None
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def version_line() -> str:
    from yeto import __version__
    commit = git_commit(Path(__file__).resolve().parent)
    return f"yeto {__version__}" + (f" (git {commit})" if commit else "")
