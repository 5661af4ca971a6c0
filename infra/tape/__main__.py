"""Entry point of the tape writer process: `python -m yeto.infra.tape --nats-url URL --db PATH`.

SIGTERM and SIGINT stop it gracefully: the batch in hand is committed and acked, what the stream already held is
landed (up to TapeConfig.drain_s), then it exits 0.
See tape/writer.py for the exactly-once design and docs/TAPE.md for the schema and the views.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from yeto.infra.tape.writer import TapeConfig, TapeWriter


def parse_args(argv: list[str] | None = None) -> TapeConfig:
    p = argparse.ArgumentParser(prog="python -m yeto.infra.tape", description=__doc__.splitlines()[0])
    p.add_argument("--nats-url", required=True, help="the stack's NATS URL")
    p.add_argument("--db", required=True, type=Path, help="the DuckDB tape file (created if missing)")
    p.add_argument("--consumer", default="tape", help="durable consumer name on YETO_EVT (default: tape)")
    p.add_argument("--batch", type=int, default=5000, help="messages per pull and per INSERT (default: 5000)")
    p.add_argument("--query-timeout", type=float, default=30.0,
                   help="seconds a SQL query's process may run before it is killed (default: 30)")
    a = p.parse_args(argv)
    return TapeConfig(nats_url=a.nats_url, db=a.db, consumer=a.consumer, batch=a.batch, query_timeout_s=a.query_timeout)


async def serve(cfg: TapeConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await TapeWriter(cfg).run(stop)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s tape %(levelname)s %(message)s")
    asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
