"""The silences of healthy learners, read from tapes: the evidence for the launcher's silence rule (liveness.py).

For every learner generation on the given tape files: each interval between two of its LearnerProgress, over its
pace as the launcher knew it just before (the longest interval so far, at least 2 s plus the last step time), and the
last report's distance to the island's exit (its final pushes and evaluation). A rule of GAPS paces never fires on a
healthy learner while the largest ratio printed stays under GAPS.

    python benchmarks/progress_gaps.py /tmp/yeto-wan-*/home/tape.duckdb /tmp/yeto-lora-*/home/tape.duckdb
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import duckdb

REPORT_EVERY_S = 2.0    # services/launcher/liveness.py's
PROGRESS = """select run_id, payload->>'learner', cast(payload->>'generation' as int), epoch(ts),
                     cast(payload->>'step_time_s' as double), payload->>'eval_loss' is not null
              from events where type = 'LearnerProgress' order by 1, 2, 3, seq"""
EXITS = """select run_id, 'island-' || (payload->>'island'), cast(payload->>'generation' as int), epoch(ts)
           from events where type = 'IslandExited'"""


def read(path: Path) -> tuple[list[tuple], dict]:
    """The tape's progress rows and exits, from a copy (a running tape writer holds its file's lock)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "tape.duckdb"
        shutil.copyfile(path, copy)
        con = duckdb.connect(str(copy), read_only=True)
        rows, exits = con.sql(PROGRESS).fetchall(), {r[:3]: r[3] for r in con.sql(EXITS).fetchall()}
        con.close()
    return rows, exits


def gaps(rows: list[tuple]) -> tuple[list[tuple[float, float, bool, bool]], dict]:
    """(interval, interval / pace, ended with an evaluation, second report) per interval; the last report per key."""
    out, last, longest, prev = [], {}, 0.0, None
    for key, t, step_s, evaluated in ((r[:3], r[3], r[4], r[5]) for r in rows):
        if prev is not None and prev[0] == key:
            gap = t - prev[1]
            out.append((gap, gap / max(longest, REPORT_EVERY_S + prev[2]), evaluated, longest == 0.0))
            longest = max(longest, gap)
        else:
            longest = 0.0
        prev, last[key] = (key, t, step_s), t
    return out, last


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tapes", nargs="+", type=Path)
    args = parser.parse_args()
    intervals, finals, read_ok = [], [], 0
    for path in args.tapes:
        try:
            rows, exits = read(path)
        except (OSError, duckdb.Error) as e:
            print(f"skipped {path}: {e}")
            continue
        read_ok += 1
        found, last = gaps(rows)
        intervals += found
        finals += [exits[key] - t for key, t in last.items() if key in exits]
    print(f"{len(intervals)} intervals between reports, {read_ok} tapes")
    for label, sel in [("all", intervals), ("ending in an evaluation", [g for g in intervals if g[2]]),
                       ("a learner's second report", [g for g in intervals if g[3]]),
                       ("after the second report", [g for g in intervals if not g[3]])]:
        if sel:
            secs, ratios = [g[0] for g in sel], [g[1] for g in sel]
            print(f"{label:>26}: {len(sel):5d}  interval p50 {quantile(secs, .5):6.2f}s max {max(secs):6.2f}s   "
                  f"interval/pace p99 {quantile(ratios, .99):.2f} p99.9 {quantile(ratios, .999):.2f} max {max(ratios):.2f}")
    if finals:
        print(f"last report -> exit: {len(finals)} generations, p50 {quantile(finals, .5):.1f}s max {max(finals):.1f}s")


if __name__ == "__main__":
    main()
