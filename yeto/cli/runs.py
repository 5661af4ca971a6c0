"""`yeto status [RUN]`: every run, or one in detail (`yeto logs` is in logs.py)."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime, timezone

from yeto.cli.autopull import pull_if_ended
from yeto.cli.common import run_id_arg
from yeto.cli.describe import describe
from yeto.cli.sql import format_table, tape_query
from yeto.cli.tape import load_run, run_filter
from yeto.cli.tape_query import stale_line
from yeto.infra.head.records import copied_tape, head_record, heads
from yeto.infra.settings import load
from yeto.infra.stack import watchdog
from yeto.schemas.run_view import spend_usd

STATUS_SQL = """
SELECT r.run_id, r.phase, strftime(r.started, '%Y-%m-%d %H:%M:%S') AS started, r.num_rounds AS rounds,
       coalesce(s.num_open, 0) AS islands_up, lp.step, lp.loss, round(coalesce(s.usd, 0), 4) AS spend_usd,
       r.num_events AS events
FROM runs r LEFT JOIN spend s USING (run_id)
LEFT JOIN (SELECT run_id, max(step) AS step, arg_max(loss, seq) AS loss FROM learner_progress GROUP BY run_id) lp USING (run_id)
ORDER BY r.started"""
COLUMNS = ["run_id", "phase", "started", "rounds", "islands_up", "step", "loss", "spend_usd", "events"]


def register(sub) -> None:
    st = sub.add_parser("status", help="every run (phase, rounds, loss, spend), or one run in detail")
    st.add_argument("run", nargs="?", type=run_id_arg, help="show this run in detail: islands, versions, learners, spend, ETA")
    st.add_argument("--json", action="store_true", help="print one JSON object: the runs (or the run's view)")
    st.set_defaults(func=run_status)


def run_status(args) -> int:
    if not (args.run and head_record(load(state_dir=args.state_dir).state_dir, args.run)):   # a cloud run: its head's
        if (line := stale_line(args)) is not None:
            print(f"warning: {line}", file=sys.stderr)
        for line in watchdog.recent_lines(load(state_dir=args.state_dir).state_dir):
            print(f"warning: {line}", file=sys.stderr)
    if args.run:
        run_filter(args.run)
        view = load_run(args, args.run)
        if args.json:       # the run's projection as the tape folds it, plus what it has spent until now
            now = datetime.now(timezone.utc)
            print(json.dumps(asdict(view) | {"spend_usd": round(spend_usd(view, now), 4)}, default=str))
            return 0
        print(describe(view, datetime.now(timezone.utc)), end="")
        if view.ended and (line := pull_if_ended(load(state_dir=args.state_dir).state_dir, args.run)):
            print(line)          # a cloud run that ended comes home on the first look (its head may go then)
        return 0
    c = load(state_dir=args.state_dir, nats_url=args.nats_url)
    recs = [] if c.nats_url else heads(c.state_dir)     # this machine's cloud runs, each asked of its head
    try:
        result = tape_query(args, STATUS_SQL)
    except ValueError:
        if c.nats_url:
            raise                                   # a stack named but not answering: an error, not "no runs"
        result = {"columns": COLUMNS, "rows": []}   # no local tape: nothing has run here, or only cloud runs
    columns, rows = result["columns"], list(result["rows"])
    for rec in recs:
        live = rec["url"] and rec["state"] in ("launching", "up")
        if rec["run_id"] in {r[0] for r in rows} or not (live or copied_tape(c.state_dir, rec["run_id"]).exists()):
            continue          # listed already, or a head taken down before it had the run
        try:
            theirs = tape_query(args, STATUS_SQL, run=rec["run_id"])
        except (ValueError, ConnectionError) as e:
            print(f"{rec['run_id']}: its head {rec['cluster']} does not answer ({str(e).splitlines()[0]})")
            continue
        columns, rows = theirs["columns"], rows + [r for r in theirs["rows"] if r[0] == rec["run_id"]]
    if args.json:
        print(json.dumps({"runs": [dict(zip(columns, r)) for r in rows]}, default=str))
        return 0
    print(format_table(columns, rows), end="")
    if not rows:
        print("no runs on the tape yet; start one with `yeto launch` (see `yeto launch --help`)", file=sys.stderr)
    return 0

