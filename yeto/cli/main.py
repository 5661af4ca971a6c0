"""Entry point of the `yeto` command: builds the parser from the command modules and maps errors to exit codes."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Each module exposes register(subparsers); its subcommands set `func(args) -> int`.
COMMAND_MODULES = ("stack", "launch", "runs", "logs", "sql", "tape", "pull", "data", "shape", "chaos", "merge", "check",
                   "lineage", "verify", "trackers", "plot", "dashboard")

EPILOG = """\
Quick start (one machine, no cloud account):
  yeto launch --gpu local:1xcpu,local:1xcpu --model <model> --data <chat.jsonl> --max-steps 50 --wait
  yeto status                       # every run: phase, islands, rounds, loss, spend
  yeto sql "select type, count(*) from events group by 1"
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="yeto", description="Fine-tune models across cheap, scattered GPUs with asynchronous DiLoCo.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", default=None, help="local stack state (default $YETO_HOME or ~/.yeto)")
    parser.add_argument("--nats-url", default=None, help="NATS URL of a running stack (default: the local stack's)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"yeto.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"yeto.cli.{name}":
                continue  # a command group not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Library warnings (a NATS client retrying its connection every 0.25 s) are not for the user: errors end in one line.
    logging.basicConfig(level=logging.ERROR, format="yeto: %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as e:   # the user's errors: the message says what to fix; no traceback, exit status 2
        print(f"yeto: error: {e}", file=sys.stderr)
        return 2
    except (ConnectionError, TimeoutError) as e:   # the bus cannot be reached within the connect timeout: one line, exit status 1
        print(f"yeto: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
