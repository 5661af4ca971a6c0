"""`yeto plot RUN`: loss.png from the tape, the same points the trackers get (per learner, and the global mean per round)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from yeto.cli.common import run_id_arg
from yeto.cli.tracker_metrics import Point


class Collect:
    """A tracker sink that keeps the points in memory, by tag."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[int, float]]] = defaultdict(list)

    def add(self, p: Point) -> None:
        self.series[p.tag].append((p.step, p.value))

    def close(self) -> None:
        pass


def register(sub) -> None:
    p = sub.add_parser("plot", help="draw a run's loss curves from the tape into a PNG")
    p.add_argument("run", type=run_id_arg, help="the run id")
    p.add_argument("--out", default="loss.png", help="the PNG to write (default: loss.png)")
    p.set_defaults(func=cmd_plot)


def _broken(points: list[tuple[int, float]]) -> list[tuple[float, float]]:
    """A gap where the step goes back (a replaced island's new generation counts again), not a line back to it."""
    out: list[tuple[float, float]] = []
    for step, value in points:
        if out and step < out[-1][0]:
            out.append((float("nan"), float("nan")))
        out.append((step, value))
    return out


def loss_png(series: dict[str, list[tuple[int, float]]], png: Path, title: str) -> int:
    """Per-learner train (solid) and eval (dashed) loss by inner step; the global mean by rounds merged on its right.
    Returns the number of curves drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    learners = sorted(t for t in series if t.startswith(("train/loss/", "eval/loss/")))
    merged, merged_eval = series.get("global/loss", []), series.get("global/eval_loss", [])
    fig, axes = plt.subplots(1, 2 if merged else 1, figsize=(11 if merged else 7, 4), squeeze=False)
    ax = axes[0][0]
    for tag in learners:
        steps, values = zip(*_broken(series[tag]))
        kind, who = tag.split("/")[0], tag.split("/")[-1]
        ax.plot(steps, values, marker=".", linestyle="--" if kind == "eval" else "-", label=f"{who} ({kind})")
    ax.set(xlabel="inner step", ylabel="loss", title=title)
    if learners:
        ax.legend()
    if merged:
        rounds, values = zip(*merged)
        axes[0][1].plot(rounds, values, marker=".", color="black", label="mean of the learners' latest")
        if merged_eval:
            axes[0][1].plot(*zip(*merged_eval), marker=".", linestyle="--", color="black", label="eval")
        axes[0][1].set(xlabel="rounds merged", ylabel="loss", title="global")
        axes[0][1].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0][1].legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return len(learners) + (1 if merged else 0) + (1 if merged and merged_eval else 0)


def cmd_plot(args) -> int:
    from yeto.cli.tape import load_run
    from yeto.cli.trackers import replay

    sink = Collect()
    replay(load_run, args, args.run, [sink])
    if not any(t.startswith("train/loss/") for t in sink.series):
        raise ValueError(f"run {args.run} has no LearnerProgress on the tape yet: nothing to plot")
    curves = loss_png(sink.series, Path(args.out), f"{args.run}: loss")
    print(f"{args.out}: {curves} curve(s) of {args.run}")
    return 0
