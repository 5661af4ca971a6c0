"""`yeto plot RUN`: loss.png from the tape, the same points the trackers get (every step of every learner, and the
global mean at each merge), all on the inner-step axis."""
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
    """Per-learner train (solid) and eval (dashed) loss at every inner step, and the global mean (black) at the
    furthest learner's step of each merge, on one step axis. Returns the number of curves drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    learners = sorted(t for t in series if t.startswith(("train/loss/", "eval/loss/")))
    merged = [(tag, label) for tag, label in (("global/loss", "global (mean of the learners' latest)"),
                                              ("global/eval_loss", "global (eval)")) if series.get(tag)]
    fig, ax = plt.subplots(figsize=(9, 4))
    for tag in learners:
        steps, values = zip(*_broken(series[tag]))
        kind, who = tag.split("/")[0], tag.split("/")[-1]
        ax.plot(steps, values, marker="." if len(steps) < 200 else None, linestyle="--" if kind == "eval" else "-",
                label=f"{who} ({kind})")
    for tag, label in merged:
        steps, values = zip(*series[tag])
        ax.plot(steps, values, marker="o", color="black", linestyle="--" if "eval" in tag else "-", label=label)
    ax.set(xlabel="inner step", ylabel="loss", title=title)
    if learners or merged:
        ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return len(learners) + len(merged)


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
