"""Trackers, plot and progress from a real tape: `yeto report --to tensorboard` read back with TensorBoard's own
reader, `yeto plot` a PNG with one curve per learner and the global one, the rich live view rendered from the events,
the refusal of a tracker whose package is missing, and the plain lines without a terminal."""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import struct
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parents[1] / "tape"))
from tape_events import scripted_run, write_tape
from yeto.cli.follow import Progress
from yeto.cli.main import main
from yeto.cli.progress_view import LiveView
from yeto.cli.trackers import Reporter
from yeto.infra.stack import StackPaths
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes

RUN = "r-track"


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A state directory whose tape holds one scripted run (two islands, a preemption, three rounds), stack down."""
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    return write_tape(tmp_path, scripted_run(RUN))


def yeto(state, *argv) -> int:
    return main(["--state-dir", str(state), *argv])


needs_tensorboard = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                                       reason="pip install tensorboard (the trackers extra)")


def read_back(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard log directory, read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@needs_tensorboard
def test_report_to_tensorboard_writes_what_tensorboard_reads_back(state, tmp_path, capsys):
    assert yeto(state, "report", RUN, "--to", "tensorboard", "--report-dir", str(tmp_path / "tb")) == 0
    assert f"points of {RUN} sent to tensorboard" in capsys.readouterr().out
    scalars = read_back(tmp_path / "tb" / "tensorboard" / RUN)
    assert scalars["train/loss/island-0"] == [(10, 2.5)]
    assert scalars["train/loss/island-1"] == [(20, 2.0), (5, pytest.approx(1.8))]   # generation 1 starts again at step 5
    assert scalars["sync/rounds_merged"] == [(1, 1.0), (2, 2.0), (3, 3.0), (3, 3.0)]   # each merge, then the end
    assert scalars["sync/global_version"][-1] == (3, 2.0)
    assert scalars["run/spend_usd"][-1] == (3, 4.5)      # the finalizer's figure at the end (the scripted spend)
    assert {"train/tokens_per_s/island-0", "train/lr/island-0", "train/step_time_s/island-0"} <= set(scalars)
    # the merged loss on the learners' step axis (the furthest learner's step at each merge), not the round index
    assert [step for step, _ in scalars["global/loss"]] == [10, 10, 20, 20]


@needs_tensorboard
def test_the_wait_follower_feeds_tensorboard_from_the_bus_as_the_replay_does(nats_server, run_id, state, tmp_path):
    from yeto.cli.common import publish
    from yeto.cli.follow import follow
    from yeto.cli.tracker_sinks import open_sinks

    asyncio.run(publish(nats_server.url, *scripted_run(run_id)))
    rep, out = Reporter(open_sinks(["tensorboard"], run_id, tmp_path / "live"), Progress(every_s=0.0)), io.StringIO()
    assert asyncio.run(follow(nats_server.url, run_id, out=out, progress=rep)) == 0     # RunFinalized ends it
    rep.close()
    assert out.getvalue().splitlines()[-1] == "run finalized (max_steps): the artifact is in /out, spend $4.5000."
    assert yeto(state, "report", RUN, "--to", "tensorboard", "--report-dir", str(tmp_path / "replay")) == 0
    live = read_back(tmp_path / "live" / "tensorboard" / run_id)
    assert live == read_back(tmp_path / "replay" / "tensorboard" / RUN) and len(live) >= 10


def test_every_tracker_sees_the_same_points_live_and_replayed(state):
    class Keep:
        def __init__(self):
            self.points = []

        def add(self, p):
            self.points.append(p)

        def close(self):
            pass

    live, replayed = Keep(), Keep()
    rep = Reporter([live], Progress(every_s=0.0))
    lines = [rep.line(e) for e in scripted_run(RUN)]       # the follower's path: event by event, as on the bus
    from yeto.cli.tape import load_run
    from yeto.cli.trackers import replay

    replay(load_run, type("Args", (), {"state_dir": str(state), "nats_url": None})(), RUN, [replayed])
    assert live.points == replayed.points and len(live.points) > 10
    assert any(line and line.startswith("  island-1 g1: step 5 loss 1.8000") for line in lines)   # console unchanged


def test_a_tracker_whose_package_is_missing_is_refused_before_anything_starts(state, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)       # how Python marks a module unimportable: find_spec says None
    with pytest.raises(SystemExit) as exit_:
        yeto(state, "report", RUN, "--to", "wandb")
    assert exit_.value.code == 2
    assert "pip install wandb" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        yeto(state, "launch", "--data", "x.jsonl", "--report-to", "tensorboard,wandb")
    assert "--report-to wandb needs the wandb package: pip install wandb" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        yeto(state, "report", RUN, "--to", "neptune")
    assert "unknown tracker; choose from tensorboard, wandb, mlflow" in capsys.readouterr().err
    (state / "run.yaml").write_text("report_to: wandb\n")                # a config file's key: the same refusal
    assert yeto(state, "launch", "-c", str(state / "run.yaml"), "--data", "x.jsonl") == 2
    assert "pip install wandb" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("wandb") is None or importlib.util.find_spec("mlflow") is None,
                    reason="pip install wandb mlflow-skinny")
def test_report_to_wandb_offline_and_mlflow_files(state, tmp_path, monkeypatch):
    import mlflow

    from yeto.cli.tracker_sinks import WandbSink

    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):     # nothing of it in the home folder
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    summary: dict = {}        # W&B's offline run: its last value of each key, read just before it finishes
    monkeypatch.setattr(WandbSink, "close", lambda self, _close=WandbSink.close: summary.update(self.run.summary) or _close(self))
    assert yeto(state, "report", RUN, "--to", "wandb,mlflow", "--report-dir", str(tmp_path)) == 0
    assert (summary["train/loss/island-1"], summary["run/spend_usd"], summary["sync/rounds_merged"]) == \
        (pytest.approx(1.8), 4.5, 3)
    assert list((tmp_path / "wandb").glob(f"offline-run-*/run-{RUN}.wandb"))    # what `wandb sync` uploads later
    client = mlflow.tracking.MlflowClient((tmp_path / "mlruns").resolve().as_uri())
    run = client.search_runs([client.get_experiment_by_name("yeto").experiment_id])[0]
    assert run.info.run_name == RUN
    history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss/island-1")]
    assert history == [(20, 2.0), (5, pytest.approx(1.8))]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "run/spend_usd")][-1] == 4.5


def test_eval_loss_reaches_the_trackers_beside_the_train_loss():
    from yeto.cli.tracker_metrics import points
    from yeto.schemas.run_view import fold
    from yeto.schemas.training import LearnerProgress

    if "eval_loss" not in LearnerProgress.model_fields:
        pytest.skip("LearnerProgress has no eval_loss here")
    progress = scripted_run(RUN)[5].model_copy(update={"eval_loss": 2.25})
    tags = {p.tag: (p.step, p.value) for p in points(progress, fold(None, progress))}
    assert tags["eval/loss/island-0"] == (10, 2.25) and tags["train/loss/island-0"] == (10, 2.5)


def test_plot_writes_a_png_with_a_curve_per_learner_and_the_global_one(state, tmp_path, capsys):
    png = tmp_path / "loss.png"
    assert yeto(state, "plot", RUN, "--out", str(png)) == 0
    assert capsys.readouterr().out.strip() == f"{png}: 3 curve(s) of {RUN}"     # island-0, island-1, the global mean
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    assert width > 1000 and height > 400           # two panels side by side


def test_plot_of_a_run_without_progress_says_so(state, capsys):
    events = scripted_run("r-empty")[:3]
    store = TapeStore(StackPaths(state).db)
    store.append([100, 101, 102], [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    store.close()
    assert yeto(state, "plot", "r-empty") == 2
    assert "no LearnerProgress" in capsys.readouterr().err


def test_live_view_renders_a_bar_per_learner_rounds_and_spend():
    console = Console(record=True, force_terminal=True, width=140, file=io.StringIO())
    view = LiveView(console, live=False)
    for event in scripted_run(RUN):
        view.line(event)
    console.print(view)
    text = console.export_text()
    assert "island-0 g0" in text and "10/100" in text and "loss 2.5000" in text
    assert "island-1 g1" in text and "5/100" in text and "ETA 1:35" in text      # 95 steps left at 1 s a step
    assert "rounds merged 3, global version 2, spend $4.5000 of $10" in text
    assert "island 1 g0: preempted (spot reclaimed)" in text      # the island lines print above the view
    assert "run finalized (max_steps)" in text


def test_wait_on_a_terminal_follows_the_bus_with_the_live_view(nats_server, run_id, tmp_path, monkeypatch):
    from yeto.cli.common import publish
    from yeto.cli.trackers import wait

    class Terminal(io.StringIO):
        def isatty(self) -> bool:      # what rich and trackers.wait ask of stdout
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setenv("COLUMNS", "140")
    asyncio.run(publish(nats_server.url, *scripted_run(run_id)))
    args = argparse.Namespace(report_to=["tensorboard"] if importlib.util.find_spec("tensorboard") else [],
                              report_dir=str(tmp_path), state_dir=str(tmp_path), nats_url=None)
    assert wait(args, nats_server.url, run_id) == 0
    text = screen.getvalue()
    assert "\x1b[" in text and "━" in text                                   # a terminal's live display, not plain lines
    assert "island-1 g1" in text and "rounds merged 3, global version 2" in text
    assert "run finalized (max_steps)" in text and "tok/s), rounds merged" not in text    # no plain progress lines


def test_plain_lines_without_a_terminal_keep_their_format():
    plain = Progress(every_s=0.0)
    lines = [line for e in scripted_run(RUN) if (line := plain.line(e))]
    assert "  island-0 g0: step 10 loss 2.5000 (1 tok/s), rounds merged 0" in lines
    assert lines[-1] == "run finalized (max_steps): the artifact is in /out, spend $4.5000."


def test_a_final_evaluation_shows_as_lines_of_its_batches_an_evaluation_while_training_does_not():
    from yeto.schemas.progress import LearnerBeat

    def beat(done: int, final: bool) -> LearnerBeat:
        return LearnerBeat(id=f"b{done}{final}", run_id=RUN, source="island-0", learner="island-0", generation=1,
                           step=400, batches_done=done, batches=16, final=final)

    plain, slow = Progress(every_s=0.0), Progress(every_s=3600.0)
    assert plain.line(beat(5, True)) == "  island-0 g1: final evaluation, 5/16 held-out batches"
    assert plain.line(beat(5, False)) is None
    assert slow.line(beat(5, True)) is not None and slow.line(beat(10, True)) is None     # at most once per every_s


def test_the_closing_line_is_a_sentence_naming_who_received_the_final_weights():
    from yeto.schemas.final import RunFinalized

    def closing(**acks):
        event = RunFinalized(id="f", run_id=RUN, output="/out", manifest_sha256="1" * 64, reason="user", spend_usd=0.5,
                             **acks)
        return Progress().line(event)

    assert closing(acked=["island-0", "island-1"]) == ("run finalized (user): the artifact is in /out, spend $0.5000; "
                                                       "island-0, island-1 received the final weights.")
    missing = closing(acked=["island-0"], missing_acks=["island-1"])
    assert missing.endswith("; island-1 did not confirm it received the final weights (the artifact does not need it).")
    assert all("none" not in line for line in (closing(), missing))


def test_report_to_without_wait_is_refused_naming_yeto_report(state, capsys):
    """Nothing would feed the trackers without --wait's follower: the flag is refused, never accepted and ignored."""
    assert yeto(state, "launch", "--gpu", "local:1xcpu", "--model", "m", "--data", "x.jsonl", "--report-to", "tensorboard") == 2
    err = capsys.readouterr().err
    assert "--report-to tensorboard needs --wait" in err and "yeto report RUN --to tensorboard" in err


def test_a_report_of_many_steps_gives_the_trackers_a_point_per_step_and_each_kind():
    from yeto.cli.tracker_metrics import points
    from yeto.schemas.progress import StepPoint
    from yeto.schemas.run_view import fold
    from yeto.schemas.training import LearnerProgress

    steps = [StepPoint(step=s, loss=2.0 / s, lr=1e-3, tokens=10, tokens_per_s=100.0, step_time_s=0.1,
                       grad_norm=None if s == 2 else 0.5) for s in (1, 2, 3)]
    event = LearnerProgress(id="p", run_id=RUN, source="l0", learner="l0", step=3, loss=2.0 / 3, tokens=30,
                            tokens_per_s=100.0, step_time_s=0.1, lr=1e-3, eval_loss=0.9, steps=steps)
    got = {}
    for p in points(event, fold(None, event)):
        got.setdefault(p.tag, []).append(p.step)
    assert got == {"train/loss/l0": [1, 2, 3], "train/lr/l0": [1, 2, 3], "train/tokens_per_s/l0": [1, 2, 3],
                   "train/step_time_s/l0": [1, 2, 3], "train/grad_norm/l0": [1, 3],   # a step without one: no point
                   "eval/loss/l0": [3]}
