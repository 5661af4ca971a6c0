"""Entry point of the `yeto` command: builds the parser from the command modules and maps errors to exit codes."""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from yeto.cli.version import VersionAction

# Each module exposes register(subparsers); its subcommands set `func(args) -> int`.
COMMAND_MODULES = ("stack", "launch.command", "runs", "logs", "sql", "tape", "pull", "data", "shape", "chaos", "merge", "check",
                   "lineage", "recover", "verify", "trackers", "plot", "dashboard", "join")

# Every command, the module that registers it and its one-line help: `yeto --help` lists these without importing the
# modules (they import DuckDB, OR-Tools, ...), and `yeto CMD` imports only CMD's module, so a command starts fast.
# tests/cli/test_cli_conventions.py keeps this table equal to what the modules register.
COMMANDS = {
    "stack": ("stack", "start, inspect or stop the local stack"),
    "launch": ("launch.command", "start a fine-tuning run (detaches; --wait follows it)"),
    "down": ("launch.command", "stop a run: final cut, artifact, teardown (--now aborts)"),
    "status": ("runs", "every run (phase, rounds, loss, spend), or one run in detail"),
    "logs": ("logs", "print a run's learner log lines (its log stream, else the local files)"),
    "sql": ("sql", "query the event tape with read-only SQL (DuckDB dialect)"),
    "tape": ("tape", "read the event tape: list events, replay a run"),
    "pull": ("pull", "copy an ended cloud run's tape and artifact back from its head VM"),
    "recover": ("recover", "replace a cloud run's lost head VM; the new one resumes the run from its mirror"),
    "data": ("data", "inspect and validate training data"),
    "shape": ("shape", "plan a fleet for a budget or TFLOPs target, without launching"),
    "chaos": ("chaos", "failure injection for tests and demos"),
    "merge": ("merge", "fold a LoRA adapter into its base; write sharded SafeTensors"),
    "check": ("check", "which clouds have working credentials, which stacks answer, what a launch needs"),
    "lineage": ("lineage", "the runs a run was resumed or branched from, and those made from it"),
    "verify": ("verify", "check an artifact's signature and file hashes; show its provenance"),
    "report": ("trackers", "replay a run's tape into TensorBoard, W&B or MLflow"),
    "plot": ("plot", "draw a run's loss curves from the tape into a PNG"),
    "dashboard": ("dashboard", "serve a live web page per run: islands, rounds, loss curves, spend, ETA"),
    "join": ("join", "run a learner here in a run's external slot (the token from yeto launch)"),
    "join-token": ("join", "print the join token of a run's external slot (a secret)"),
}
GLOBAL_FLAGS = (("--state-dir", "local stack state (default $YETO_HOME or ~/.yeto)"),
                ("--nats-url", "NATS URL of a running stack (default: the local stack's)"))

EPILOG = """\
Quick start (one machine, no cloud account):
  yeto launch --gpu local:1xcpu,local:1xcpu --model <model> --data <chat.jsonl> --max-steps 50 --wait
  yeto status                       # every run: phase, islands, rounds, loss, spend
  yeto sql "select type, count(*) from events group by 1"

Exit status: 0 success, 1 runtime error (a stack or head that does not answer, a failed run step),
2 usage error (a bad flag or value, an unknown run id). Global flags go before or after the command.
"""


def _add_global_flags(parser: argparse.ArgumentParser, top: bool) -> None:
    """The global flags on the top parser and on every (sub)command, so they are accepted before or after it;
    below the top they default to SUPPRESS, so an absent flag never overwrites one given before the command."""
    own = {s for a in parser._actions for s in a.option_strings}
    for flag, help_ in GLOBAL_FLAGS:
        if flag not in own:
            parser.add_argument(flag, default=None if top else argparse.SUPPRESS, help=help_)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _add_global_flags(child, False)


def build_parser(only: set[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only` (module names) the other modules' commands are stubs that only list themselves."""
    parser = argparse.ArgumentParser(
        prog="yeto", description="Fine-tune models across cheap, scattered GPUs with asynchronous DiLoCo.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=VersionAction, help="print the version (and the git commit in a checkout)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        if only is not None and name not in only:
            for command, (owner, help_) in COMMANDS.items():
                if owner == name:
                    sub.add_parser(command, help=help_)
            continue
        try:
            module = importlib.import_module(f"yeto.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"yeto.cli.{name}":
                continue  # a command group not built yet
            raise
        module.register(sub)
    _add_global_flags(parser, True)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command named in argv (the first word that is neither a global flag nor its value), or None."""
    values = {flag for flag, _ in GLOBAL_FLAGS}
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in values:
            skip = True
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word
    return None


def plain(error: BaseException) -> str:
    """An error's message without terminal colour codes (SkyPilot's errors carry them into Yeto's)."""
    from yeto.cli.launch.confirm import strip_ansi
    return strip_ansi(str(error))


def main(argv: list[str] | None = None) -> int:
    completing = "_ARGCOMPLETE" in os.environ       # a shell asks for completions (argcomplete; docs/CLI.md)
    argv = os.environ.get("COMP_LINE", "").split()[1:] if completing else sys.argv[1:] if argv is None else argv
    command = COMMANDS.get(command_of(argv) or "")
    if command and command[0] == "launch.command" and not completing:
        from yeto.cli.launch.early import zygote_first
        with zygote_first(argv):        # the learners' imports begin before this command's own (launch/early.py)
            return run_command(argv, command, completing)
    return run_command(argv, command, completing)


def run_command(argv: list[str], command: tuple[str, str] | None, completing: bool) -> int:
    parser = build_parser({command[0]} if command else set())
    if completing:
        try:
            import argcomplete
        except ImportError:
            return 1                                # no completions without it; never a traceback in the shell
        from yeto.cli.completion import attach
        attach(parser)                              # RUN and --run complete from the state dir's run ids
        argcomplete.autocomplete(parser)            # prints the completions and exits
    args = parser.parse_args(argv)
    # Library warnings (a NATS client retrying its connection every 0.25 s) are not for the user: errors end in one line.
    logging.basicConfig(level=logging.ERROR, format="yeto: %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as e:   # the user's errors: the message says what to fix; no traceback, exit status 2
        print(f"yeto: error: {plain(e)}", file=sys.stderr)
        return 2
    except (ConnectionError, TimeoutError) as e:   # the bus cannot be reached within the connect timeout: one line, exit status 1
        print(f"yeto: error: {plain(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
