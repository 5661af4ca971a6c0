"""Paths built from a run id: `<state>/runs/<run_id>/...`, checked to stay inside the state directory."""
from __future__ import annotations

from pathlib import Path

from yeto.schemas.base import check_run_id


def run_path(state_dir: Path | str, run_id: str, *parts: str, area: str = "runs") -> Path:
    """`<state_dir>/<area>/<run_id>/<parts...>` (area: runs, or syncer for its snapshots).

    ValueError for a run id off the pattern (so no '/', '.', '..') or a part that is absolute or holds '..';
    the resolved result (symlinks followed) must lie under the resolved `<state_dir>/<area>/<run_id>`."""
    check_run_id(run_id)
    runs = Path(state_dir).expanduser() / area
    base = runs / run_id
    for part in parts:
        p = Path(part)
        if p.is_absolute() or ".." in p.parts or not str(part):
            raise ValueError(f"{part!r} is not a path inside run {run_id}'s folder: use a relative path without '..'")
    path = base.joinpath(*parts)
    if not path.resolve().is_relative_to(base.resolve()) or not base.resolve().is_relative_to(runs.resolve()):
        raise ValueError(f"{path} leaves the run folder {base} (a symlink?); refusing to use it")
    return path
