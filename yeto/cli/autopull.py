"""The copy-back of an ended cloud run without asking (`yeto pull`'s work, infra/head/copyback.py): at the end of `yeto
launch --wait` and on `yeto status RUN`, so the run is on the laptop, and its head may go, as soon as someone looks.
A run that goes on is "not yet", never an error; a head that fails mid-copy leaves `yeto pull RUN` to finish it."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

from yeto.cli.pull import layout_of  # where the output folder's deployable files are (schemas/artifact_layout.py)
from yeto.infra.head import records as heads
from yeto.infra.run_paths import run_path


def pull_if_ended(state_dir: Path, run_id: str) -> str | None:
    """Copy the run back when it is a cloud run of this machine whose head is up and the run has ended; one line
    saying what happened, or None when there is nothing to copy (a local run, a run copied or its head down)."""
    rec = heads.head_record(state_dir, run_id)
    if rec is None or rec["state"] not in ("launching", "up") or not rec["url"]:
        return None
    from yeto.infra.head.copyback import copy_back  # DuckDB and Arrow: imported by a copy, not by every command
    os.environ.update(heads.head_env(rec))          # this process talks to the head as its operator
    try:
        copied = asyncio.run(copy_back(state_dir, run_id, rec["url"]))
    except ValueError as e:                         # the run goes on (the next look copies it), or a file is wrong
        return f"not copied back yet: {e}"
    except (ConnectionError, TimeoutError, OSError) as e:
        return f"copying run {run_id} back failed ({e}); `yeto pull {run_id}` tries again (what was copied stays)"
    files = (f" and its artifact ({copied.num_files} files, checked; deploy "
             f"{layout_of(run_path(state_dir, run_id, 'artifact'))})") if copied.num_files else ""
    return (f"copied run {run_id} back: its tape ({copied.tape_rows} events){files} is on this machine "
            f"({heads.head_dir(state_dir, run_id)}); the head stops itself now")
