"""`yeto sql "<query>"`: read-only SQL over the event tape, asked of the running tape writer or read from the file.

Also the helpers the other read-side commands share: `tape_query(args, sql)` and the renderers.
"""
from __future__ import annotations

import asyncio
import csv
import io
import json
from typing import Any

from yeto.cli.common import check_run, run_id_arg, run_source
from yeto.infra.bus import connect
from yeto.infra.settings import load
from yeto.infra.stack import StackPaths, stack_url

MAX_ROWS = 100_000   # infra.tape_sql's; that module imports DuckDB, which only a command that queries should pay for

HELP = """Examples:
  yeto sql "select type, count(*) from events group by 1 order by 2 desc"
  yeto sql "select * from runs"
  yeto sql "select run_id, fragment, global_version, num_responders, grace_ms from rounds order by seq desc limit 10"
  yeto sql "select learner, max(step), min(loss) from learner_progress where run_id = 'r-demo' group by 1"
  yeto sql "select * from spend" --format csv

Tables and views: events(seq, ts, run_id, type, version, source, payload JSON), runs, rounds,
learner_progress, island_uptime, spend, rejections (docs/TAPE.md). Payload fields: payload->>'loss'.
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
    result = tape_query(args, args.query, max_rows=args.max_rows, run=args.run)
    print(render(result["columns"], result["rows"], args.format), end="")
    if result.get("truncated") and args.format == "table":
        print(f"(stopped at {args.max_rows} rows; add a LIMIT or raise --max-rows)")
    return 0


def tape_query(args, sql: str, *, max_rows: int = MAX_ROWS, run: str | None = None) -> dict[str, Any]:
    """{columns, rows, ...}: from the running stack's tape writer, else from the tape file read-only. With `run`,
    from where that run's tape is (its head VM, or the tape copied back from it: common.run_source)."""
    from yeto.infra.tape_sql import NoTapeWriterError, query_file
    settings = load(state_dir=getattr(args, "state_dir", None), nats_url=getattr(args, "nats_url", None))
    if run:
        url, db, only = run_source(args, run)
    else:
        url, db = settings.nats_url or stack_url(settings.state_dir), StackPaths(settings.state_dir).db
        only = "check --nats-url / $YETO_NATS_URL" if settings.nats_url else None
    if url:
        try:
            return asyncio.run(_ask(url, sql, max_rows))
        except (ConnectionError, NoTapeWriterError) as e:
            if only:  # a remote stack: there is no local file to fall back on
                raise ValueError(f"{e}; {only}") from None
    return query_file(db, sql, max_rows=max_rows)


async def _ask(url: str, sql: str, max_rows: int) -> dict[str, Any]:
    from yeto.infra.tape_sql import ask
    try:
        bus = await connect(url, name="yeto-cli", connect_timeout=2)
    except Exception as e:  # noqa: BLE001 - any failure to connect means: read the file instead
        raise ConnectionError(str(e)) from None
    try:
        return await ask(bus, sql, max_rows=max_rows)
    finally:
        await bus.close()


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
