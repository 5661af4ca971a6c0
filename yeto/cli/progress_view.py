"""`yeto launch --wait` on a terminal: a rich live view (a bar per learner: steps, tokens/s, loss, ETA; rounds; spend)."""
from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.text import Text

from yeto.cli.describe import max_steps
from yeto.cli.follow import Progress as Lines
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.run_view import RunView, fold, spend_usd
from yeto.services.planner.estimate import learner_seconds_left, seconds_left


def _max_steps(view: RunView) -> int | None:
    return max_steps(view.recipe)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


class LiveView:
    """The renderer follow.py calls per event: learner progress and rounds update the view in place; the other lines
    worth a human's attention (islands, final cut, the end) print above it, worded as without a terminal."""

    def __init__(self, console: Console | None = None, live: bool = True):
        self.console = console or Console()
        self.view: RunView | None = None
        self.lines = Lines(every_s=0.0)
        self.tasks: dict[str, Any] = {}
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("loss {task.fields[loss]}  {task.fields[tps]} tok/s  ETA {task.fields[eta]}"),
                             console=self.console, auto_refresh=False)
        self.live = Live(self, console=self.console, refresh_per_second=4) if live else None
        if self.live:
            self.live.start()

    def __rich__(self) -> Group:
        return Group(self.bars, self.footer())

    def footer(self) -> Text:
        v = self.view
        if v is None:
            return Text("waiting for the run's first event ...")
        version = max(v.versions.values(), default=0)
        limit = LaunchRecipe.upcast(v.recipe).limits.max_spend
        spend = f"${spend_usd(v, v.last_ts):.4f}" + (f" of ${limit:g}" if limit else "")
        left = seconds_left(v, v.last_ts) if v.last_ts else None     # status's and the dashboard's ETA, at the event's time
        eta = f", run ETA {_eta(left)}" if left is not None else ""
        return Text(f"{v.phase}: rounds merged {v.rounds_merged}, global version {version}, spend {spend}{eta}")

    def _learner(self, e: Any) -> None:
        total = _max_steps(self.view) if self.view else None
        left = learner_seconds_left(total, e.step, e.step_time_s) if total else None
        fields: dict[str, Any] = dict(loss=f"{e.loss:.4f}", tps=f"{e.tokens_per_s:.0f}", eta=_eta(left))
        if e.learner not in self.tasks:
            self.tasks[e.learner] = self.bars.add_task(e.learner, total=total, **fields)
        self.bars.update(self.tasks[e.learner], completed=e.step, description=f"{e.learner} g{e.generation}", **fields)

    def line(self, e: Any) -> str | None:
        self.view = fold(self.view, e)
        if e.type == "LearnerProgress":
            self._learner(e)
            return None
        text = self.lines.line(e)      # RoundMerged only counts (footer); the rest print above the view
        if text:
            self.console.print(text, highlight=False, markup=False)
        return None      # follow.py's own print would pass by the live display

    def close(self) -> None:
        if self.live:
            self.live.stop()
