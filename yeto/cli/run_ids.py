"""Run ids the user types: which runs this machine knows, did-you-mean for the others, and `--last`."""
from __future__ import annotations

import difflib

from yeto.cli.common import conf, state_dir
from yeto.cli.tape_query import TapeUnreachable, tape_query
from yeto.infra.head import records as heads


def known_runs(args) -> list[str]:
    """The run ids this machine knows, oldest first: the tape's (the local stack's, or --nats-url's; none when there is
    no tape yet) and those of the cloud runs launched from here (their head records)."""
    try:
        ids = [r[0] for r in tape_query(args, "SELECT run_id FROM runs ORDER BY started")["rows"]]
    except TapeUnreachable:
        raise                       # the tape was not asked: "no such run" would be a guess
    except (ValueError, ConnectionError):
        ids = []
    return ids + [rec["run_id"] for rec in heads.heads(state_dir(args)) if rec["run_id"] not in ids]


def suggest(args, run_id: str, known: list[str] | None = None) -> str:
    """What to say after "no such run": the closest known ids (a typo is the usual cause), or that there are none."""
    known = known_runs(args) if known is None else known
    if not known:
        return f"no runs on the tape ({conf(args).nats_url or state_dir(args)}) yet"
    close = difflib.get_close_matches(run_id, known, n=3, cutoff=0.6)
    return (f"did you mean {' or '.join(close)}? " if close else "") + "`yeto status` lists the runs"


def unknown_run(args, run_id: str, known: list[str] | None = None) -> ValueError:
    return ValueError(f"no run {run_id!r} on the tape; {suggest(args, run_id, known)}")


def check_run(args, run_id: str) -> str:
    """run_id when this machine knows the run, else ValueError with did-you-mean (exit status 2)."""
    known = known_runs(args)
    if run_id not in known:
        raise unknown_run(args, run_id, known)
    return run_id


def run_or_last(args) -> str:
    """`RUN` or `--last` (the newest run): the run a command is about; ValueError when neither or none is known."""
    if getattr(args, "last", False):
        if args.run:
            raise ValueError("give a run id or --last, not both")
        known = known_runs(args)
        if not known:
            raise ValueError(f"--last: no runs on the tape ({conf(args).nats_url or state_dir(args)}) yet")
        return known[-1]
    if not args.run:
        raise ValueError("give a run id, or --last for the newest run (`yeto status` lists them)")
    return args.run
