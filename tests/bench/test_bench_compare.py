"""compare_diloco's machinery on a tiny model: the real DilocoHook + SyncerCore islands are deterministic,
merge every round with every island, and export the syncer's state as a working model; the CLI plans."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lib_arms  # noqa: E402
import lib_compare  # noqa: E402
import lib_task  # noqa: E402

from yeto.learners.torch.recipe import TrainRecipe  # noqa: E402
from yeto.schemas.recipe import SyncConfig  # noqa: E402


def test_compare_dry_run_prints_every_arm():
    out = subprocess.run([sys.executable, str(ROOT / "scripts/compare_diloco.py"), "--settings", "all", "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in ["sync", *lib_compare.SETTINGS]:
        assert f"arm {name}:" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "dry_run=ok"
    bad = subprocess.run([sys.executable, str(ROOT / "scripts/compare_diloco.py"), "--settings", "nope", "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown setting" in bad.stderr


def test_overrides_and_deltas():
    assert lib_compare.parse_overrides(["outer_lr=1", "quorum=None", "merge=avg"]) == {
        "outer_lr": 1, "quorum": None, "merge": "avg"}
    assert lib_compare.deltas_pct([1.01, 2.0], [1.0, 2.0]) == pytest.approx([1.0, 0.0])
    with pytest.raises(ValueError):
        lib_compare.parse_overrides(["outer_lr"])


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    work = tmp_path_factory.mktemp("cmp")
    model = lib_task.write_tiny_model(work / "model", layers=2, hidden=32)
    data = lib_task.write_markov_chat(work / "chat.jsonl", rows=600)
    return TrainRecipe(model=str(model), data=str(data), tuning="full", lr=3e-3, warmup_steps=2, max_steps=16,
                       micro_batch=2, seq_len=64, heldout_fraction=0.05)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_islands_are_deterministic_and_export_the_syncer_state(recipe):
    torch.set_num_threads(1)
    sync = SyncConfig(num_fragments=2, inner_steps=4)
    runs = [lib_arms.run_yeto(recipe, sync, 2, heldout_blocks=8) for _ in range(2)]
    assert runs[0].heldout_ce == runs[1].heldout_ce            # simulated time: the same order of events every run
    stats = runs[0].stats
    assert stats["rounds"] >= 2 * (16 // 4) - 2 and stats["responders"] == 2.0 and stats["rejected"] == 0
    assert 0.5 < stats["goodput"] <= 1.0
    base = lib_arms.run_sync(recipe.replace(max_steps=1, lr=1e-9), 2, heldout_blocks=8).heldout_ce
    assert runs[0].heldout_ce < base - 0.02                    # the exported state is the trained model
    assert runs[0].tokens == lib_arms.run_sync(recipe, 2, heldout_blocks=8).tokens   # equal tokens


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_straggler_with_quorum_one_merges_without_it(recipe):
    torch.set_num_threads(1)
    out = lib_arms.run_yeto(recipe, SyncConfig(num_fragments=2, inner_steps=4, quorum=1, grace_max_s=0.0), 2,
                            step_s=[1.0, 3.0], heldout_blocks=8)
    assert out.stats["responders"] < 2.0
