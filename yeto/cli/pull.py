"""`yeto pull RUN`: copy an ended cloud run back from its head VM (tape, artifact), so it answers with no head up."""
from __future__ import annotations

import asyncio

from yeto.cli.common import conf, run_id_arg, url_for_run
from yeto.infra.head import records as heads
from yeto.infra.run_paths import run_path
from yeto.schemas.artifact_layout import DEPLOY, RESUME


def register(sub) -> None:
    p = sub.add_parser("pull", help="copy an ended cloud run's tape and artifact back from its head VM",
                       description="Replays the run's events from its head into <state>/heads/RUN/tape.duckdb, fetches "
                                   "the output folder when it lives only on the head into <state>/runs/RUN/artifact "
                                   "(artifact/ to deploy, resume/ to resume from; each file checked against the "
                                   "manifest), then tells the head it may go. Afterwards "
                                   "`yeto status/sql/tape` answer for the run from the copy. Safe to repeat.")
    p.add_argument("run", type=run_id_arg, help="the run id")
    p.set_defaults(func=cmd_pull)


def layout_of(folder) -> str:
    """Where the pulled output folder's deployable files and resume state are (schemas/artifact_layout.py)."""
    if (folder / DEPLOY).is_dir():
        resume = f"; the resume state is in {folder / RESUME}" if (folder / RESUME).is_dir() else ""
        return f"{folder / DEPLOY}{resume}"
    return f"{folder} (a flat folder: finalized before {DEPLOY}/ and {RESUME}/)"


def cmd_pull(args) -> int:
    c, run = conf(args), args.run
    rec = heads.head_record(c.state_dir, run)
    if rec is None and not c.nats_url:
        raise ValueError(f"run {run} has no head record under {c.state_dir}: a local run's tape is here already "
                         f"(`yeto status {run}`); for a head launched elsewhere pass its --nats-url")
    if rec is not None and not c.nats_url:
        if rec["state"] == "copied":
            print(f"run {run} was copied back already: {heads.copied_tape(c.state_dir, run)} (`yeto status {run}`)")
            return 0
        if rec["state"] == "down" or not rec["url"]:
            raise ValueError(f"run {run}'s head is {'down' if rec['state'] == 'down' else 'not up yet'}: there is "
                             f"nothing to copy from")
    from yeto.infra.head.copyback import copy_back  # DuckDB and Arrow: for this command, not for every `yeto`
    url = url_for_run(args, run)
    assert url is not None, "a head that is up, or --nats-url"
    copied = asyncio.run(copy_back(c.state_dir, run, url))
    print(f"copied run {run}: {copied.tape_rows} events to {heads.copied_tape(c.state_dir, run)}")
    if copied.num_files:
        folder = run_path(c.state_dir, run, "artifact")
        print(f"  output: {copied.num_files} files, each matching the manifest, in {folder}")
        print(f"  deploy {layout_of(folder)}")
    print("  the head stops itself now (RunCopiedBack published)")
    return 0
