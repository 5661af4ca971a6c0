"""`--report-to` on launch and `yeto report RUN --to ...`: one follower of a run's events feeds every experiment tracker.

Live, the follower is the one `yeto launch --wait` runs (follow.py): each event is folded into the run's view, turned
into points (tracker_metrics.py) and handed to every backend, then rendered on the console. `yeto report` replays a
run's tape through the same follower, so finished runs, runs launched without --wait and cloud runs copied back
(`yeto pull`) reach the trackers with the same numbers.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from yeto.cli.common import run_id_arg, state_dir
from yeto.cli.tracker_metrics import points
from yeto.cli.tracker_sinks import BACKENDS, Sink, check, open_sinks
from yeto.schemas.run_view import RunView, fold

HELP = """Examples:
  yeto report r-demo --to tensorboard          # then: tensorboard --logdir ~/.yeto/runs/r-demo/tensorboard
  WANDB_MODE=offline yeto report r-demo --to wandb --to mlflow
"""


class TrackerRefused(argparse.ArgumentTypeError, ValueError):
    """argparse prints its message as a usage error; a config file's loader (launch/config.py) catches ValueError."""


def _names(value: str) -> list[str]:
    """argparse `type=`: comma-separated trackers, each known and installed, else a usage error before anything starts."""
    names = [v.strip() for v in str(value).split(",") if v.strip()]
    try:
        check(names)
    except ValueError as e:
        raise TrackerRefused(str(e)) from None
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The launch flags (one call from launch.py's register)."""
    p.add_argument("--report-to", action="extend", type=_names, default=[], metavar="TRACKER",
                   help=f"with --wait, log the run live to {', '.join(BACKENDS)} (repeat or comma-separate; "
                        "refused without --wait: `yeto report RUN` does it afterwards)")
    p.add_argument("--report-dir", default=None, help="where tracker files go (default: the run's folder)")


def check_launch(args: argparse.Namespace) -> None:
    """--report-to is fed by --wait's follower: without it nothing would ever reach the trackers, so it is refused."""
    if getattr(args, "report_to", None) and not args.wait:
        raise ValueError(f"--report-to {','.join(args.report_to)} needs --wait (its follower feeds the trackers); "
                         f"without --wait, run `yeto report RUN --to {','.join(args.report_to)}` once the run is going or done")


def register(sub) -> None:
    p = sub.add_parser("report", help="replay a run's tape into TensorBoard, W&B or MLflow", epilog=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=run_id_arg, help="the run id")
    p.add_argument("--to", dest="report_to", action="extend", type=_names, required=True, metavar="TRACKER",
                   help=f"one or more of {', '.join(BACKENDS)}")
    p.add_argument("--report-dir", default=None, help="where tracker files go (default: the run's folder)")
    p.set_defaults(func=cmd_report)


class Reporter:
    """A follower: folds each event into the run's view, hands its points to every sink, then to the console renderer."""

    def __init__(self, sinks: list[Sink], inner: Any = None):
        self.sinks, self.inner = sinks, inner
        self.view: RunView | None = None
        self.points = 0

    def feed(self, event: Any, seq: int = 0) -> None:
        self.view = view = fold(self.view, event, seq)
        for p in points(event, view):
            self.points += 1
            for sink in self.sinks:
                sink.add(p)

    def line(self, event: Any) -> str | None:        # the renderer interface follow.py calls per event
        self.feed(event)
        return self.inner.line(event) if self.inner is not None else None

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        if self.inner is not None and hasattr(self.inner, "close"):
            self.inner.close()


def report_dir(args, run_id: str) -> Path:
    return Path(args.report_dir) if args.report_dir else state_dir(args) / "runs" / run_id


def replay(view_loader: Callable[..., RunView], args, run_id: str, sinks: list[Sink]) -> Reporter:
    rep = Reporter(sinks)
    view_loader(args, run_id, each=lambda seq, event, _view: rep.feed(event, seq))
    return rep


def cmd_report(args) -> int:
    from yeto.cli.tape import load_run

    out = report_dir(args, args.run)
    rep = replay(load_run, args, args.run, open_sinks(args.report_to, args.run, out))
    rep.close()
    print(f"{rep.points} points of {args.run} sent to {', '.join(dict.fromkeys(args.report_to))} (files under {out})")
    return 0


def wait(args, url: str, run_id: str, then: Callable[[], str | None] | None = None) -> int:
    """`yeto launch --wait`: follow the run with the live view on a terminal (plain lines otherwise), feeding trackers."""
    from yeto.cli.follow import Progress, follow_or_detach

    inner: Any = Progress()
    if sys.stdout.isatty():
        from yeto.cli.progress_view import LiveView
        inner = LiveView()
    rep = Reporter(open_sinks(args.report_to, run_id, report_dir(args, run_id)) if args.report_to else [], inner)
    try:
        return follow_or_detach(url, run_id, then=then, progress=rep)
    finally:
        rep.close()
