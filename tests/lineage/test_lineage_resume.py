"""Resume and branch for real: a run stopped by --max-steps is resumed (`yeto launch --resume-from`) and its loss
goes on from where it stopped, as one uninterrupted run of the same total steps does; a mismatch is refused before
anything starts; a branch records its parent, and `yeto lineage` shows the tree. One island: its merges are the
syncer's outer step alone, so the runs differ only by what a resume loses (the learner's AdamW moments)."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from e2e_checks import heldout_loss
from e2e_stack import TRAIN_FLAGS, Stack

pytestmark = [pytest.mark.slow]
ONE = "local:1xcpu"
HALF, TOTAL = 30, 60        # the tiny model's loss is off its start and still falling at HALF


@pytest.fixture(scope="module")
def stack(tmp_path_factory, material):
    s = Stack(tmp_path_factory.mktemp("lineage") / "home", material["model"], material["data"])
    # One thread a learner: the resumed and the uninterrupted run train side by side, and the launcher splits the
    # host's cores among one launch's islands only (services/launcher/backends/local.py), so each one-island run's
    # learner took both cores: 4 OpenMP threads on 2 cores, steps of 1-4 s instead of 0.1-0.2 s (2026-12-06, 38af797:
    # 60 steps in 41 s). The launcher keeps an OMP_NUM_THREADS its stack was started with.
    s.env["OMP_NUM_THREADS"] = "1"
    yield s
    s.down()


def start(s: Stack, run_id: str, *flags: str) -> float:
    s.launch(run_id, *flags, islands=ONE)
    return time.monotonic()


def finished(s: Stack, run_id: str, started: float) -> Path:
    s.finish(run_id, timeout=420)
    print(f"{run_id}: launch to exit {time.monotonic() - started:.0f}s")
    (written,) = s.events(run_id, "ArtifactWritten")
    return Path(written["local_path"])


def run(s: Stack, run_id: str, *flags: str) -> Path:
    return finished(s, run_id, start(s, run_id, *flags))


@pytest.fixture(scope="module")
def parent(stack) -> Path:
    return run(stack, "lin-parent", "--max-steps", str(HALF))


def story(s: Stack) -> str:
    """What a failure needs to be understood (one failed once in CI at cbf654d, the uninterrupted run's loss 3.05 where
    2.67 is usual): each run's events by type, every restart the stack's watchdog made, every round's responders."""
    counts = s.sql("select run_id, type, count(*) n from events where run_id like 'lin-%' group by 1, 2 order by 1, 2")
    restarts = s.sql("select ts, payload from events where type = 'ComponentRestarted' order by seq")
    rounds = s.sql("select run_id, fragment, global_version, num_responders from rounds where run_id like 'lin-%' "
                   "order by run_id, fragment, global_version")
    return f"events: {counts}\nwatchdog restarts: {restarts}\nrounds: {rounds}"


def progress(s: Stack, run_id: str) -> list[tuple[int, float]]:
    rows = s.sql(f"select step, loss from learner_progress where run_id = '{run_id}' order by seq")
    return [(r["step"], r["loss"]) for r in rows]


@pytest.mark.timeout(1200)
def test_a_run_stopped_by_max_steps_resumes_where_it_stopped_like_one_uninterrupted_run(stack, parent, material):
    manifest = json.loads((parent / "manifest.json").read_text())
    assert manifest["resume"]["start_step"] == HALF and manifest["resume"]["files"], manifest["resume"]

    refused = stack.yeto("launch", "--gpu", ONE, "--model", str(material["model"]), "--data", str(material["data"]),
                         *TRAIN_FLAGS, "--lora-r", "8", "--max-steps", str(TOTAL), "--resume-from", "lin-parent",
                         "--run-id", "lin-refused")
    assert refused.returncode != 0 and "train.lora_r: lin-parent has 16, this launch 8" in refused.stderr, refused.stderr
    assert "--branch-from lin-parent" in refused.stderr
    assert not stack.events("lin-refused", "RunLaunched"), "a refused resume started a run"

    # Side by side on the one stack: one island each, so neither run's merges depend on the other's timing.
    began = {r: start(stack, r, "--max-steps", str(TOTAL), *extra)
             for r, extra in (("lin-resumed", ("--resume-from", "lin-parent")), ("lin-straight", ()))}
    resumed, straight = (finished(stack, r, t) for r, t in began.items())
    (event,) = stack.events("lin-resumed", "RunResumed")
    assert event["parent_run"] == "lin-parent" and event["start_step"] == HALF
    assert event["parent_artifact_sha256"] == hashlib.sha256((parent / "manifest.json").read_bytes()).hexdigest()

    first, then, ref_run = (progress(stack, r) for r in ("lin-parent", "lin-resumed", "lin-straight"))
    assert then[0][0] > HALF, f"the resumed run did not continue the step count: {then}"
    rows, model = material["heldout"], material["model"]
    base, mid = heldout_loss(model, None, rows), heldout_loss(model, parent, rows)
    end, ref = heldout_loss(model, resumed, rows), heldout_loss(model, straight, rows)
    print(f"held-out loss: base {base:.4f}, parent at {HALF} {mid:.4f}, resumed to {TOTAL} {end:.4f}, uninterrupted "
          f"{ref:.4f}\ntraining loss: parent {first}\n  resumed {then}\n  uninterrupted {ref_run}")
    told = story(stack)     # read now, while the stack serves: said with a failure below
    # No jump back: the resumed run's first loss is near where the parent ended, far below where the parent began.
    assert then[0][1] < first[-1][1] + 0.3 * (first[0][1] - first[-1][1]), (first, then)
    assert end <= mid + 0.05, f"the resumed run ended worse ({end:.4f}) than its parent ({mid:.4f})"
    assert abs(end - ref) < 0.1 * ref, f"resumed {end:.4f} vs uninterrupted {ref:.4f}\n{told}"
    assert abs(then[-1][1] - ref_run[-1][1]) < 0.15 * ref_run[-1][1], (then, ref_run)


@pytest.mark.timeout(600)
def test_a_branch_records_its_parent_and_yeto_lineage_shows_the_tree(stack, parent, material):
    run(stack, "lin-branch", "--max-steps", "10", "--branch-from", str(parent), "--seed", "3")
    (event,) = stack.events("lin-branch", "RunBranched")
    assert event["parent_run"] == "lin-parent" and event["parent_artifact"] == str(parent.resolve())
    assert not stack.events("lin-branch", "RunResumed")
    assert stack.sql("select kind, parent_run from lineage where run_id = 'lin-branch'") == \
        [{"kind": "branch", "parent_run": "lin-parent"}]
    start = progress(stack, "lin-branch")[0]
    assert start[1] < heldout_loss(material["model"], None, material["heldout"]) - 0.3, f"not from the parent's weights: {start}"
    shown = stack.yeto("lineage", "lin-branch")
    assert shown.returncode == 0 and shown.stdout.splitlines()[0] == "lin-parent", shown.stdout + shown.stderr
    assert "lin-branch  (branched)   <- this run" in shown.stdout
