"""`yeto sql "<query>"`: read-only SQL over the event tape, asked of the running tape writer or read from the file.

Also the helpers the other read-side commands share: `tape_query(args, sql)` and the renderers.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any

from yeto.cli.common import run_id_arg
from yeto.cli.run_ids import check_run
from yeto.cli.tape_query import tape_query

HELP = """Examples:
  yeto sql "select type, count(*) from events group by 1 order by 2 desc"
  yeto sql "select * from runs"
  yeto sql "select run_id, fragment, global_version, num_responders, grace_ms from rounds order by seq desc limit 10"
  yeto sql "select learner, max(step), min(loss) from learner_progress where run_id = 'r-demo' group by 1"
  yeto sql "select * from spend" --format csv

Tables and views: events(seq, ts, run_id, type, version, source, payload JSON), runs, rounds,
learner_progress, learner_steps (every step), island_uptime, spend, rejections (docs/TAPE.md). Payload fields:
payload->>'loss'.
Only reading statements run; the tape changes only by events.
"""


def register(sub) -> None:
    p = sub.add_parser("sql", help="query the event tape with read-only SQL (DuckDB dialect)", epilog=HELP,
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("query", help="one SELECT / WITH / SHOW / DESCRIBE / EXPLAIN statement")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format (default: table)")
    p.add_argument("--max-rows", type=int, default=10_000, help="stop after this many rows (default: 10000)")
    p.add_argument("--run", type=run_id_arg, help="ask this run's tape: its head VM's, or the copy of a cloud run that ended")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.run:
        check_run(args, args.run)
    result = tape_query(args, args.query, max_rows=args.max_rows, run=args.run, views=False)
    print(render(result["columns"], result["rows"], args.format), end="")
    if result.get("truncated") and args.format == "table":
        print(f"(stopped at {args.max_rows} rows; add a LIMIT or raise --max-rows)")
    return 0


def render(columns: list[str], rows: list[list[Any]], fmt: str = "table") -> str:
    if fmt == "json":
        return json.dumps([dict(zip(columns, r)) for r in rows], indent=1) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(columns)
        w.writerows([[("" if v is None else _cell(v, None)) for v in r] for r in rows])
        return out.getvalue()
    return format_table(columns, rows)


def _cell(value: Any, width: int | None = 60) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def format_table(columns: list[str], rows: list[list[Any]]) -> str:
    """An aligned text table: numbers right-aligned, long cells cut at 60 characters, a row count at the end."""
    cells = [[_cell(v) for v in r] for r in rows]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) and rows != [] for i in range(len(columns))]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(list(columns)), "  ".join("─" * w for w in widths)] + [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out) + "\n"
