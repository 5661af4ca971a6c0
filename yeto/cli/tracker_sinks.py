"""Experiment tracker backends behind one interface (add points, close): TensorBoard, Weights & Biases, MLflow."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from yeto.cli.tracker_metrics import Point

BACKENDS = ("tensorboard", "wandb", "mlflow")
PACKAGE = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


class Sink(Protocol):
    def add(self, p: Point) -> None: ...
    def close(self) -> None: ...


class TensorBoardSink:
    """Event files under `logdir` (`tensorboard --logdir DIR`); torch's writer, which needs the tensorboard package."""

    def __init__(self, run_id: str, logdir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.dir = logdir / "tensorboard" / run_id
        self.writer = SummaryWriter(log_dir=str(self.dir))

    def add(self, p: Point) -> None:
        self.writer.add_scalar(p.tag, p.value, global_step=p.step, walltime=p.wall_time or None)

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A W&B run named after the Yeto run; WANDB_MODE=offline keeps it in files (`wandb sync` uploads them later)."""

    def __init__(self, run_id: str, logdir: Path):
        import wandb

        logdir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project="yeto", name=run_id, id=run_id, dir=str(logdir), resume="allow")
        for prefix, step in (("train", "learner_step"), ("eval", "learner_step"), ("sync", "round"), ("run", "round"),
                             ("global", "learner_step")):     # tracker_metrics.py: what each group is stepped by
            self.run.define_metric(f"{prefix}/*", step_metric=step)

    def add(self, p: Point) -> None:
        key = "learner_step" if p.tag.startswith(("train/", "eval/", "global/")) else "round"
        self.run.log({p.tag: p.value, key: p.step})

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    """An MLflow run named after the Yeto run; the tracking URI is $MLFLOW_TRACKING_URI, else a file store in `logdir`."""

    def __init__(self, run_id: str, logdir: Path):
        import os

        import mlflow

        self.mlflow = mlflow
        if not os.environ.get("MLFLOW_TRACKING_URI"):   # local files, as `mlflow ui --backend-store-uri DIR` reads
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")    # MLflow 3 asks for this opt-in
            mlflow.set_tracking_uri((logdir / "mlruns").resolve().as_uri())
        mlflow.set_experiment("yeto")
        self.run = mlflow.start_run(run_name=run_id)

    def add(self, p: Point) -> None:
        self.mlflow.log_metric(p.tag, p.value, step=p.step, timestamp=int(p.wall_time * 1000) or None)

    def close(self) -> None:
        self.mlflow.end_run()


CLASSES: dict[str, Callable[[str, Path], Sink]] = {"tensorboard": TensorBoardSink, "wandb": WandbSink, "mlflow": MlflowSink}


def check(names: list[str]) -> None:
    """Refuse before anything starts: an unknown backend, or one whose package is not installed here."""
    for name in names:
        if name not in CLASSES:
            raise ValueError(f"--report-to {name}: unknown tracker; choose from {', '.join(BACKENDS)}")
        if importlib.util.find_spec(PACKAGE[name]) is None:
            raise ValueError(f"--report-to {name} needs the {PACKAGE[name]} package: pip install {PACKAGE[name]}")


def open_sinks(names: list[str], run_id: str, logdir: Path) -> list[Sink]:
    check(names)
    return [CLASSES[name](run_id, logdir) for name in dict.fromkeys(names)]
