"""`yeto --version`: the package version, and the git commit when yeto runs from a checkout."""
from __future__ import annotations

import argparse
from pathlib import Path


class VersionAction(argparse.Action):
    """--version: computed only when asked (a git call costs time every other command should not pay)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def git_commit(where: Path) -> str | None:
    """The checkout's short commit (with `+dirty` when files changed), or None outside a git checkout."""
    import subprocess
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
