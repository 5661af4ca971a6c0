"""Helpers the CLI modules share: settings from flags, the stack's URL, running a coroutine."""
from __future__ import annotations

import asyncio
from pathlib import Path

from yeto.infra import settings
from yeto.infra.stack import StackPaths, stack_url


def conf(args):
    return settings.load(state_dir=getattr(args, "state_dir", None), nats_url=getattr(args, "nats_url", None))


def paths(args) -> StackPaths:
    return StackPaths(conf(args).state_dir)


def url_or_none(args) -> str | None:
    """The NATS URL given (flag or $YETO_NATS_URL), else the local stack's when it runs, else None."""
    c = conf(args)
    return c.nats_url or stack_url(c.state_dir)


def require_url(args) -> str:
    url = url_or_none(args)
    if not url:
        raise ValueError(f"no stack is running under {conf(args).state_dir}: start one with `yeto stack up` "
                         f"(or pass --nats-url / set YETO_NATS_URL)")
    return url


def run(coro):
    return asyncio.run(coro)


def state_dir(args) -> Path:
    return conf(args).state_dir
