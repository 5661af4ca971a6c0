"""Helpers the CLI modules share: settings from flags, the state directory, the running stack's URL."""
from __future__ import annotations

from pathlib import Path

from yeto.infra import settings
from yeto.infra.stack import stack_url


def conf(args):
    return settings.load(state_dir=getattr(args, "state_dir", None), nats_url=getattr(args, "nats_url", None))


def url_or_none(args) -> str | None:
    """The NATS URL given (flag or $YETO_NATS_URL), else the local stack's when it runs, else None."""
    c = conf(args)
    return c.nats_url or stack_url(c.state_dir)


def state_dir(args) -> Path:
    return conf(args).state_dir
