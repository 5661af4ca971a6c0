"""`yeto logs RUN [--island N] [--follow] [--lines N]`: a run's learner log lines, wherever its islands run.

Where they come from: the run's log stream (YETO_LOG), where every learner publishes its lines, local and cloud
alike (learners/transport/logs.py), read from wherever the run's bus answers (its head for a cloud run); then, for
a SkyPilot island that never published a line (it failed while setting up, before its learner connected), the
tail of SkyPilot's log of its managed job; and, when the stream has nothing of the run, the local files
`<state>/runs/<run>/logs/*.log` (logs_files.py: a local run's launcher writes them, a cloud run's copy-back saves its
stream there before the head goes), saying so.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TextIO

from yeto.cli.common import conf, run_id_arg, url_for_run
from yeto.cli.logs_files import follow_logs, log_files
from yeto.cli.logs_stream import read_logs
from yeto.cli.run_ids import known_runs, run_or_last, unknown_run
from yeto.cli.sql import tape_query
from yeto.cli.tape import run_filter
from yeto.infra.run_paths import run_path
from yeto.schemas.fleet import learner_name

EXAMPLES = """Examples:
  yeto logs r-demo                   # the newest 50 lines of every island
  yeto logs r-demo --island 1 -f     # island 1's, then every new one until the run ends (or Ctrl-C)
"""


def register(sub) -> None:
    lg = sub.add_parser("logs", help="print a run's learner log lines (its log stream, else the local files)",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    lg.add_argument("run", nargs="?", type=run_id_arg, help="the run id")
    lg.add_argument("--last", action="store_true", help="the newest run instead of RUN")
    lg.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the run ends or Ctrl-C")
    lg.add_argument("--island", type=int, default=None, help="only island N's lines")
    lg.add_argument("--lines", "-n", type=int, default=50, help="newest lines to start with (default: 50; of each "
                                                                   "file when read from the local files)")
    lg.add_argument("--json", action="store_true", help='one JSON object a line: {"source": "stream"|"file"|"skypilot", '
                                                        '"learner", "line"}')
    lg.set_defaults(func=run_logs)


def run_logs(args) -> int:
    args.run = run_or_last(args)
    run_filter(args.run)
    url, state = url_for_run(args, args.run), conf(args).state_dir
    learner = None if args.island is None else learner_name(args.island)
    files_dir = run_path(state, args.run, "logs")

    def files():
        return log_files(state, args.run, args.island) if files_dir.is_dir() else []
    jobs, found = skypilot_jobs(args), {"stream": 0, "sky": 0}

    def then(printed: int, seen: set[str]) -> bool:
        """After the stream's newest lines: the cloud islands that never published, and whether to follow it."""
        why = "never published a line" if url else "may have published lines, but no bus of the run answers"
        found["stream"], found["sky"] = printed, print_setup_logs(jobs, seen, args.lines, why,
                                                                  output(args, "skypilot", learner))
        return args.follow and (printed > 0 or not files())

    if url:
        asyncio.run(read_logs(url, args.run, learner, lines=args.lines, out=output(args, "stream", learner), then=then))
    else:
        then(0, set())
    if found["stream"] or (url and args.follow and not files()):
        return 0
    if files():
        where = "on the bus" if url else "on the bus (no stack answers for it)"
        print(f"yeto: no log lines of run {args.run} {where}; the local files under {files_dir}:", file=sys.stderr)
        follow_logs(files, output(args, "file", learner), lines=args.lines, follow=args.follow)
        return 0
    if found["sky"]:
        return 0
    if args.run not in (known := known_runs(args)):
        raise unknown_run(args, args.run, known)
    raise ValueError(f"no log lines of run {args.run!r}: none on the bus{'' if url else ' (no stack answers for it)'}, "
                     f"none under {files_dir}; `yeto status` lists the runs")


def skypilot_jobs(args) -> dict[int, str]:
    """Island -> the managed job id of its newest generation, for the run's SkyPilot islands (of --island) on the tape."""
    try:
        rows = tape_query(args, f"SELECT payload FROM events WHERE {run_filter(args.run)} AND type IN ('IslandUp', "
                                f"'IslandReplaced') ORDER BY seq", run=args.run)["rows"]
    except (ValueError, ConnectionError):   # no tape of the run here: no islands to ask SkyPilot about
        return {}
    jobs: dict[int, str] = {}
    for (payload,) in rows:
        event = json.loads(payload) if isinstance(payload, str) else payload
        if event.get("backend") == "skypilot" and str(event.get("handle", "")).isdigit() \
                and args.island in (None, event.get("island")):
            jobs[event["island"]] = event["handle"]
    return jobs


def print_setup_logs(jobs: dict[int, str], seen: set[str], lines: int, why: str, out: TextIO = sys.stdout) -> int:
    """The tail of SkyPilot's log of each island's job whose learner has no line on the bus; how many were shown."""
    silent = {i: job for i, job in sorted(jobs.items()) if learner_name(i) not in seen}
    if silent:
        from yeto.services.launcher.api import sky_api  # SkyPilot is imported only when it is needed

    for island, job in silent.items():
        try:
            from yeto.cli.launch.confirm import start_sky_server
            start_sky_server()     # detached from this terminal: `yeto logs RUN | less` must end
            text = sky_api().jobs_logs(int(job))
        except Exception as e:  # noqa: BLE001 - SkyPilot's own errors are many; the user reads its first line
            text = f"(SkyPilot did not give it: {str(e).splitlines()[0] if str(e) else type(e).__name__})"
        print(f"yeto: island {island} {why}; SkyPilot's log of its job {job}:", file=sys.stderr)
        for line in text.splitlines()[-lines:]:
            print(f"[{learner_name(island)}] {line}", file=out)
    out.flush()
    return len(silent)


def output(args, source: str, learner: str | None) -> TextIO:
    """Where lines go: stdout as they are, or with --json as JSON objects (JsonLines)."""
    return JsonLines(sys.stdout, source, learner) if args.json else sys.stdout


class JsonLines:
    """A text sink turning each line ("[learner] text", or "text" of the one learner asked for) into a JSON object."""

    def __init__(self, out: TextIO, source: str, learner: str | None):
        self.out, self.source, self.learner, self.buffer = out, source, learner, ""

    def write(self, text: str) -> int:
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            who, rest = self.learner, line
            if line.startswith("[") and "] " in line:
                who, rest = line[1:line.index("] ")], line[line.index("] ") + 2:]
            self.out.write(json.dumps({"source": self.source, "learner": who, "line": rest}) + "\n")
        return len(text)

    def flush(self) -> None:
        self.out.flush()
