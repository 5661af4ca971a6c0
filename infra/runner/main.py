"""Shared wiring of a service process: flags, logging, then the runner until a signal."""
from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable

from yeto.infra import settings
from yeto.infra.runner import ServiceSpec, run_service


def main(name: str, build: Callable[[argparse.Namespace], ServiceSpec], argv: list[str] | None = None,
         extra_flags: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m yeto.services.{name}", description=f"The Yeto {name} service.")
    parser.add_argument("--nats-url", default=None, help="NATS URL without credentials (default $YETO_NATS_URL); the "
                        "credential comes from the 0600 file $YETO_NATS_CREDS names")
    parser.add_argument("--state-dir", default=None, help="stack state directory (default $YETO_HOME or ~/.yeto)")
    parser.add_argument("--instance", default=None, help="instance name (default: service-host-pid)")
    if extra_flags:
        extra_flags(parser)
    args = parser.parse_args(argv)
    try:
        conf = settings.load(state_dir=args.state_dir, nats_url=args.nats_url)
    except ValueError as e:
        parser.error(str(e))
    if not conf.nats_url:
        parser.error("--nats-url (or $YETO_NATS_URL) is required")
    args.settings = conf
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    asyncio.run(run_service(build(args), conf.nats_url, instance=args.instance))
