"""Acceptance as a newcomer tries it: `yeto launch --gpu local:1xcpu,local:1xcpu ... --wait` exits 0, the tape
shows rounds merged from both learners with versions advancing one by one and one RunFinalized, and the
artifact loads (peft adapter, or a full model) with a held-out loss well below the base model's.
Two runs, LoRA then full tuning, share one stack (the second run also proves a stack serves runs in turn)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from e2e_checks import heldout_loss, round_versions
from e2e_stack import Stack

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def shared(tmp_path_factory, material):
    s = Stack(tmp_path_factory.mktemp("accept") / "home", material["model"], material["data"])
    yield s
    s.down()


def check_run(s: Stack, run_id: str, output: str, material: dict, *, kind: str) -> None:
    assert f"launched {run_id}" in output and "run finalized (max_steps)" in output, output
    merged = s.events(run_id, "RoundMerged")
    both = [e for e in merged if {"island-0", "island-1"} <= set(e["responders"])]
    assert len(both) >= 2, f"rounds with both learners: {[(e['fragment'], e['responders']) for e in merged]}"
    versions = round_versions(merged)
    assert sorted(versions) == [0, 1], versions
    for p, vs in versions.items():                     # every fragment: 1, 2, 3, ... with no gap, none twice
        assert vs == list(range(1, len(vs) + 1)), f"fragment {p} versions {vs}"
    published = round_versions(s.events(run_id, "GlobalVersionPublished"))
    assert all(vs == list(range(len(vs))) for vs in published.values()), published
    (final,) = s.events(run_id, "RunFinalized")
    assert final["reason"] == "max_steps"
    (written,) = s.events(run_id, "ArtifactWritten")
    assert written["artifact_kind"] == kind
    artifact = Path(written["local_path"])
    base = heldout_loss(material["model"], None, material["heldout"])
    tuned = heldout_loss(material["model"], artifact, material["heldout"])
    print(f"{run_id}: {kind} artifact held-out loss {tuned:.4f} vs base {base:.4f}; "
          f"{len(merged)} rounds ({len(both)} with both learners), final versions {({p: v[-1] for p, v in versions.items()})}")
    assert tuned < base - 0.25, f"held-out loss {tuned:.4f} is not clearly below the base model's {base:.4f}"


@pytest.mark.timeout(240)
def test_lora_two_local_islands_finalize_with_both_learners_merged_and_a_better_adapter(shared, material):
    started = time.monotonic()
    shared.launch("accept-lora", "--max-steps", "300")
    output = shared.finish("accept-lora", timeout=200)
    print(f"accept-lora: launch to exit {time.monotonic() - started:.0f}s")
    check_run(shared, "accept-lora", output, material, kind="adapter")
    rows = shared.sql("select type, count(*) n from events where run_id = 'accept-lora' "
                      "and type in ('RunFinalized', 'RunFailed') group by 1")
    assert rows == [{"type": "RunFinalized", "n": 1}]
    sql = shared.yeto("sql", "select num_responders from rounds where run_id = 'accept-lora'", "--format", "csv")
    assert sql.returncode == 0 and "2" in sql.stdout.split(), sql.stdout + sql.stderr   # `yeto sql` itself
    logs = shared.yeto("logs", "accept-lora", "--island", "1")    # what the learner published on the log stream
    assert logs.returncode == 0 and "INFO yeto.learner: done: steps " in logs.stdout, logs.stdout + logs.stderr
    # the finalizer imported the artifact's libraries while the run trained (services/finalizer/warm.py)
    assert "imported the lm artifact's libraries ahead of its write" in (shared.home / "logs" / "finalizer.log").read_text()


@pytest.mark.timeout(200)
def test_full_tuning_second_run_on_the_same_stack_finalizes_with_a_better_full_model(shared, material):
    started = time.monotonic()
    shared.launch("accept-full", "--tuning", "full", "--max-steps", "150", "--lr", "1e-3")
    output = shared.finish("accept-full", timeout=170)
    print(f"accept-full: launch to exit {time.monotonic() - started:.0f}s")
    check_run(shared, "accept-full", output, material, kind="full")
    shared.down()                                      # the tape file, read once the stack is down
    rows = shared.sql("select run_id, count(*) n from events where type = 'RunFinalized' group by 1 order by 1")
    assert rows == [{"run_id": "accept-full", "n": 1}, {"run_id": "accept-lora", "n": 1}]
