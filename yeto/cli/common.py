"""Helpers the CLI modules share: settings from flags, the state directory, the running stack's URL."""
from __future__ import annotations

import argparse
from pathlib import Path

from yeto.infra import settings
from yeto.infra.stack import stack_url
from yeto.schemas.base import check_run_id


def conf(args):
    return settings.load(state_dir=getattr(args, "state_dir", None), nats_url=getattr(args, "nats_url", None))


def url_or_none(args) -> str | None:
    """The NATS URL given (flag or $YETO_NATS_URL), else the local stack's when it runs, else None."""
    c = conf(args)
    return c.nats_url or stack_url(c.state_dir)


def state_dir(args) -> Path:
    return conf(args).state_dir


def run_id_arg(value: str) -> str:
    """argparse `type=` for a run id: a bad one exits 2 with the allowed pattern."""
    try:
        return check_run_id(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
