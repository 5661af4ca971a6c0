"""Helpers the CLI modules share: settings from flags, the state directory, where a stack (or a run's head) answers."""
from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path

from yeto.infra import heads, settings
from yeto.infra.bus import connect
from yeto.infra.stack import StackPaths, stack_url
from yeto.schemas.base import check_run_id


def conf(args):
    return settings.load(state_dir=getattr(args, "state_dir", None), nats_url=getattr(args, "nats_url", None))


def url_or_none(args) -> str | None:
    """The NATS URL given (flag or $YETO_NATS_URL), else the local stack's when it runs, else None."""
    c = conf(args)
    return c.nats_url or stack_url(c.state_dir)


def run_source(args, run_id: str) -> tuple[str | None, Path, str | None]:
    """Where the run's tape answers: (URL or None, the tape file to read when none answers, why the URL is the only
    place to look, or None when falling back on the file is right). Order: --nats-url / $YETO_NATS_URL, the run's
    head while it is up (this process then talks to it with the head's operator credential and CA), the tape copied
    back from the head, the local stack."""
    c = conf(args)
    if c.nats_url:
        return c.nats_url, StackPaths(c.state_dir).db, "check --nats-url / $YETO_NATS_URL"
    rec = heads.head_record(c.state_dir, run_id)
    if rec and rec["state"] in ("launching", "up") and rec["url"]:
        os.environ.update(heads.head_env(rec))
        return rec["url"], StackPaths(c.state_dir).db, f"the head of run {run_id} ({rec['cluster']}) does not answer; " \
                                                        f"is it still up? (`sky status {rec['cluster']}`)"
    if rec and heads.copied_tape(c.state_dir, run_id).exists():
        return None, heads.copied_tape(c.state_dir, run_id), None
    return stack_url(c.state_dir), StackPaths(c.state_dir).db, None


def url_for_run(args, run_id: str) -> str | None:
    """The NATS URL that serves the run: --nats-url / $YETO_NATS_URL, else its head's (with the head's credential
    and CA set for this process), else the local stack's when it runs, else None."""
    return run_source(args, run_id)[0]


async def publish(url: str, *msgs) -> None:
    bus = await connect(url, name="cli")
    try:
        for msg in msgs:
            await bus.publish(msg)
    finally:
        await bus.close()


def state_dir(args) -> Path:
    return conf(args).state_dir


def run_id_arg(value: str) -> str:
    """argparse `type=` for a run id: a bad one exits 2 with the allowed pattern."""
    try:
        return check_run_id(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def known_runs(args) -> list[str]:
    """The run ids this machine knows, oldest first: the tape's (the local stack's, or --nats-url's; none when there is
    no tape yet) and those of the cloud runs launched from here (their head records)."""
    from yeto.cli.sql import tape_query  # sql imports this module; DuckDB only when a run id is checked
    try:
        ids = [r[0] for r in tape_query(args, "SELECT run_id FROM runs ORDER BY started")["rows"]]
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
