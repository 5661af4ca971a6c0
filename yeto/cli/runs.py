"""`yeto status [RUN]` (every run, or one in detail) and `yeto logs RUN [--follow] [--island N]`.

Log path convention: the launcher writes each island's learner output to
`<state>/runs/<run>/logs/island-<N>.log` (one file per rank may add a suffix:
`island-<N>.rank<R>.log`); `yeto logs` reads every `*.log` there, `--island N` those of island N.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from yeto.cli.common import run_id_arg
from yeto.cli.describe import describe
from yeto.cli.sql import format_table, tape_query
from yeto.cli.tape import load_run, run_filter
from yeto.infra.run_paths import run_path
from yeto.infra.settings import load

STATUS_SQL = """
SELECT r.run_id, r.phase, strftime(r.started, '%Y-%m-%d %H:%M:%S') AS started, r.num_rounds AS rounds,
       coalesce(s.num_open, 0) AS islands_up, lp.step, lp.loss, round(coalesce(s.usd, 0), 4) AS spend_usd,
       r.num_events AS events
FROM runs r LEFT JOIN spend s USING (run_id)
LEFT JOIN (SELECT run_id, max(step) AS step, arg_max(loss, seq) AS loss FROM learner_progress GROUP BY run_id) lp USING (run_id)
ORDER BY r.started"""


def register(sub) -> None:
    st = sub.add_parser("status", help="every run (phase, rounds, loss, spend), or one run in detail")
    st.add_argument("run", nargs="?", type=run_id_arg, help="show this run in detail: islands, versions, learners, spend, ETA")
    st.set_defaults(func=run_status)
    lg = sub.add_parser("logs", help="print a run's learner logs (<state>/runs/<run>/logs/*.log)")
    lg.add_argument("run", type=run_id_arg, help="the run id")
    lg.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    lg.add_argument("--island", type=int, default=None, help="only island N's logs")
    lg.add_argument("--lines", "-n", type=int, default=50, help="lines of each file to start with (default: 50)")
    lg.set_defaults(func=run_logs)


def run_status(args) -> int:
    if args.run:
        run_filter(args.run)
        print(describe(load_run(args, args.run), datetime.now(timezone.utc)), end="")
        return 0
    result = tape_query(args, STATUS_SQL)
    if not result["rows"]:
        print("no runs on the tape yet; start one with `yeto launch` (see `yeto launch --help`)")
        return 0
    print(format_table(result["columns"], result["rows"]), end="")
    return 0


def log_files(state_dir: Path, run: str, island: int | None) -> list[Path]:
    files = sorted(run_path(state_dir, run, "logs").glob("*.log"))
    if island is not None:
        files = [f for f in files if f.name.startswith(f"island-{island}.")]
    return files


def run_logs(args) -> int:
    run_filter(args.run)
    state = load(state_dir=args.state_dir).state_dir
    logs = run_path(state, args.run, "logs")
    if not logs.is_dir():
        raise ValueError(f"no logs for run {args.run!r} under {logs}; `yeto status` lists the runs "
                         f"(logs of a cloud run are on its head: pass that --state-dir)")
    follow_logs(lambda: log_files(state, args.run, args.island), sys.stdout, lines=args.lines,
                follow=args.follow)
    return 0


def follow_logs(files: Callable[[], list[Path]], out: TextIO, *, lines: int, follow: bool,
                stop: Callable[[], bool] = lambda: False, interval: float = 0.5) -> None:
    """Print the last `lines` of each file; with `follow`, then whatever they (or new files) append until stop()."""
    offsets: dict[Path, int] = {}
    first = True
    while True:
        current = files()
        for f in current:
            with open(f, "rb") as fh:
                fh.seek(offsets.get(f, 0))
                data = fh.read()
            end = data.rfind(b"\n") + 1 if follow else len(data)  # a half-written line waits for its end
            offsets[f] = offsets.get(f, 0) + end
            chunk = data[:end]
            if first:
                chunk = b"".join(chunk.splitlines(keepends=True)[-lines:]) if lines else b""
            prefix = f"[{f.stem}] " if len(current) > 1 else ""
            for line in chunk.decode("utf-8", "replace").splitlines():
                out.write(prefix + line + "\n")
        out.flush()
        first = False
        if not follow or stop():
            return
        time.sleep(interval)
