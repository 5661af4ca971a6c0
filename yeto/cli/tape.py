"""`yeto tape show [RUN]` lists events from the tape; `yeto tape replay RUN` refolds the run's view and prints its timeline."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from yeto.cli.common import run_id_arg
from yeto.cli.describe import describe
from yeto.cli.run_ids import check_run, suggest
from yeto.cli.sql import format_table, tape_query
from yeto.schemas import SchemaError, parse
from yeto.schemas.base import check_run_id
from yeto.schemas.run_view import RunView, fold, spend_usd

ENVELOPE = {"id", "type", "version", "run_id", "ts", "source", "causation_id"}
PAGE = 5000

HELP = """Examples:
  yeto tape show                          # the last 50 events of every run
  yeto tape show r-demo --type RoundMerged --limit 20
  yeto tape replay r-demo                 # the run's state after each event
  yeto tape replay r-demo --until 1200    # ... up to stream sequence 1200
"""


def register(sub) -> None:
    p = sub.add_parser("tape", help="read the event tape: list events, replay a run", epilog=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    tsub = p.add_subparsers(dest="tape_command", metavar="{show,replay}", required=True)
    show = tsub.add_parser("show", help="list events, newest last")
    show.add_argument("run", nargs="?", type=run_id_arg, help="only this run's events")
    show.add_argument("--type", help="only events of this type (e.g. RoundMerged)")
    show.add_argument("--limit", type=int, default=50, help="how many of the latest events (default: 50)")
    show.add_argument("--json", action="store_true", help='print {"events": [{seq, ts, run_id, type, source, payload}]}')
    show.set_defaults(func=run_show)
    rep = tsub.add_parser("replay", help="refold the run's projection from its first event and print the timeline")
    rep.add_argument("run", type=run_id_arg, help="the run id")
    rep.add_argument("--until", type=int, default=None, help="stop after this stream sequence")
    rep.set_defaults(func=run_replay)


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def run_filter(run: str) -> str:
    return f"run_id = {quote(check_run_id(run))}"   # a bad id: ValueError naming the pattern


def run_show(args) -> int:
    where = [run_filter(check_run(args, args.run))] if args.run else []
    if args.type:
        where.append(f"type = {quote(args.type)}")
    cond = f"WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT seq, ts, run_id, type, source, payload FROM events {cond} ORDER BY seq DESC LIMIT {int(args.limit)}"
    result = tape_query(args, sql, run=args.run)
    if args.json:
        events = [dict(zip(["seq", "ts", "run_id", "type", "source"], r[:5]), payload=_dict(r[5]))
                  for r in reversed(result["rows"])]
        print(json.dumps({"events": events}, default=str))
        return 0
    rows = [[seq, clock(ts, "%Y-%m-%d %H:%M:%S.%f"), run, type_, source, _summary(payload)]
            for seq, ts, run, type_, source, payload in reversed(result["rows"])]
    print(format_table(["seq", "ts", "run", "type", "source", "fields"], rows), end="")
    return 0


def clock(ts: Any, fmt: str = "%H:%M:%S.%f") -> str:
    """A timestamp (datetime, or ISO text from the bus) to the millisecond."""
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    return ts.strftime(fmt)[:-3] if ts else ""


def _dict(payload: Any) -> Any:
    return json.loads(payload) if isinstance(payload, str) else payload


def _summary(payload: Any) -> str:
    data = _dict(payload)
    if not isinstance(data, dict):
        return repr(data)
    return " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in data.items() if k not in ENVELOPE)


def as_event(payload: dict[str, Any]) -> Any:
    """A tape payload as its model when this Yeto knows the type (old versions upcast), else the dict itself."""
    try:
        return parse(payload)
    except SchemaError:
        return payload


def run_events(args, run: str, until: int | None = None) -> Iterator[tuple[int, Any]]:
    """(seq, event) of one run in order, paged so a long run never needs one huge reply. The run is the subject's:
    `vouched` leaves out events whose payload claims another run, type or learner than their subject (docs/TAPE.md)."""
    after, cond = 0, run_filter(run) + (f" AND seq <= {int(until)}" if until is not None else "")
    while True:
        rows = tape_query(args, f"SELECT seq, payload FROM vouched WHERE {cond} AND seq > {after} "
                                f"ORDER BY seq LIMIT {PAGE}", run=run)["rows"]
        for seq, payload in rows:
            data = json.loads(payload) if isinstance(payload, str) else payload
            if isinstance(data, dict):  # an unparsable payload has nothing to fold
                yield seq, as_event(data)
        if len(rows) < PAGE:
            return
        after = rows[-1][0]


def load_run(args, run: str, until: int | None = None, each: Callable[[int, Any, RunView], None] | None = None) -> RunView:
    view = None
    for seq, event in run_events(args, run, until):
        view = fold(view, event, seq)
        if each:
            each(seq, event, view)
    if view is None:
        raise ValueError(f"no events of run {run!r} on the tape; {suggest(args, run)}")
    return view


def timeline_row(seq: int, event: Any, v: RunView) -> list[Any]:
    up = sum(1 for isl in v.islands if isl.phase == "up")
    losses = [lr.loss for lr in v.learners.values() if lr.loss is not None]
    loss = sum(losses) / len(losses) if losses else None
    return [seq, clock(v.last_ts), getattr(event, "type", None) or event.get("type"), v.phase,
            f"{up}/{len(v.islands)}", v.rounds_merged, v.num_tokens, loss, round(spend_usd(v, v.last_ts), 4)]


def run_replay(args) -> int:
    rows: list[list[Any]] = []
    view = load_run(args, args.run, args.until, lambda seq, ev, v: rows.append(timeline_row(seq, ev, v)))
    print(format_table(["seq", "time", "event", "phase", "islands up", "rounds", "tokens", "mean loss", "spend $"], rows))
    print(describe(view, view.last_ts), end="")
    return 0
