"""Helpers the CLI modules share: settings from flags, the state directory, where a stack (or a run's head) answers."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from yeto.infra import settings
from yeto.infra.bus import connect
from yeto.infra.head import records as heads
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
