"""Shell completion of run ids (argcomplete): the runs this machine's state dir knows, from its files, no bus asked."""
from __future__ import annotations

import argparse
from pathlib import Path

from yeto.cli.common import run_id_arg
from yeto.schemas.base import RUN_ID_RE

# Folders named by run id: a local run's files, its learners' credentials, a cloud run's head record.
RUN_FOLDERS = ("runs", "auth/learners", "heads")


def state_run_ids(state: Path) -> list[str]:
    """Every run id the state dir holds a folder for, or its tape a row for (when the stack is down), newest first."""
    found: dict[str, float] = {}
    for area in RUN_FOLDERS:
        for p in (state / area).glob("*"):
            if p.is_dir() and RUN_ID_RE.fullmatch(p.name):
                found[p.name] = max(found.get(p.name, 0.0), p.stat().st_mtime)
    found.update({run_id: found.get(run_id, 0.0) for run_id in _tape_run_ids(state / "tape.duckdb")})
    return sorted(found, key=lambda r: (-found[r], r))


def _tape_run_ids(tape: Path) -> list[str]:
    """The tape's run ids when the file opens read-only; none while the tape writer holds it (the folders have them)."""
    if not tape.exists():
        return []
    try:
        import duckdb
        with duckdb.connect(str(tape), read_only=True) as db:
            rows = db.execute("SELECT DISTINCT run_id FROM events").fetchall()
    except Exception:  # noqa: BLE001 - locked by the running writer, or no events table yet: nothing to add
        return []
    return [r[0] for r in rows if isinstance(r[0], str) and RUN_ID_RE.fullmatch(r[0])]


def complete_run_ids(prefix: str, parsed_args: argparse.Namespace, **_) -> list[str]:
    from yeto.infra.settings import load

    state = load(state_dir=getattr(parsed_args, "state_dir", None)).state_dir
    return [r for r in state_run_ids(Path(state)) if r.startswith(prefix)]


def attach(parser: argparse.ArgumentParser) -> None:
    """Give every argument that takes a run id (a RUN positional, --run) the run id completer, in every subcommand."""
    for action in parser._actions:
        if action.type is run_id_arg:
            action.completer = complete_run_ids  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                attach(child)
