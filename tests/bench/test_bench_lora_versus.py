"""benchmarks/lora_task.py's side-by-side lines: the sparse arm against the default and exact DDP against sync, paired
by seed (held-out CE with its interval, steps, bytes up and down); the sparse arm's launch flags."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lora_task  # noqa: E402


def fake(arm, seed, ce, *, up, learners=2, broadcast=None, broadcast_q4=None, lr=1e-3):
    run = {"arm": arm, "seed": seed, "heldout_ce": ce, "lr": lr, "warmup": 5, "labelled_tokens": 100, "wall_s": 60.0,
           "rounds_merged": 8, "single_rounds": 0, "bytes_up": up, "bytes_down": 0, "max_step": 300,
           "learners": learners}
    if broadcast is not None:
        run |= {"broadcast_bytes": broadcast, "broadcast_bytes_q4": broadcast_q4}
    return run


def test_sparse_against_default_pairs_ce_and_counts_both_directions():
    runs = [fake("sync", s, 2.0, up=1e6, learners=1) for s in (0, 1, 2)]
    # default: q4, from before broadcast bytes were recorded; sparse: +1, +2, +3 % CE
    runs += [fake("default", s, 2.0, up=8e6) for s in (0, 1, 2)]
    runs += [fake("sparse", s, 2.0 * (1 + (s + 1) / 100), up=2e6, broadcast=1e6, broadcast_q4=3e6) for s in (0, 1, 2)]
    lines = lora_task.report(runs, [])
    line = next(x for x in lines if x.startswith("sparse_vs_default_ce_delta_pct="))
    # Δ +1, +2, +3 %: mean 2, sd 1, t(2) 4.3027 / sqrt 3 = 2.4842
    assert line.startswith("sparse_vs_default_ce_delta_pct=+2.000 ci95=[-0.484,+4.484] n=3 steps=300/300 ")
    # up: 2 MB against 8; down: 1 MB published x 2 learners against q4's 3 MB x 2 (a stand-in, starred)
    assert "up_MB=2.00/8.00(x0.250)" in line and "down_MB=2.00/6.00(x0.333)*" in line and line.endswith("total=x0.286")
    assert lines[-1].startswith("default_delta_pct=+0.000 ")          # the last line stays default against sync


def test_ddp_against_sync_uses_measured_broadcasts_where_both_have_them():
    runs = [fake("sync", s, 2.0, up=1e6, learners=1, broadcast=3e6, broadcast_q4=3e6) for s in (0, 1)]
    runs += [fake("ddp", s, 1.98, up=1e6, learners=1, broadcast=3e6, broadcast_q4=3e6) for s in (0, 1)]
    runs += [fake("ddp", 2, 1.0, up=1e6, learners=1)]                  # no sync run of seed 2: not paired
    line = next(x for x in lora_task.report(runs, []) if x.startswith("ddp_vs_sync_ce_delta_pct="))
    assert line.startswith("ddp_vs_sync_ce_delta_pct=-1.000 ci95=[-1.000,-1.000] n=2 ")
    assert "down_MB=3.00/3.00(x1.000) " in line and line.endswith("total=x1.000")


def test_bytes_count_only_the_seeds_where_both_runs_counted_theirs():
    """A JSON whose bytes read 0 (docqa's sparse seed 3: its islands' last log lines were a replacement's) is no
    measurement: its CE pairs, its bytes do not, and the line names the seeds the bytes are over."""
    runs = [fake("sync", s, 2.0, up=1e6, learners=1) for s in (0, 1, 2)]
    runs += [fake("default", s, 2.0, up=8e6, broadcast=3e6, broadcast_q4=3e6) for s in (0, 1, 2)]
    runs += [fake("sparse", s, 2.0, up=0 if s == 1 else 2e6, broadcast=1e6, broadcast_q4=3e6) for s in (0, 1, 2)]
    line = next(x for x in lora_task.report(runs, []) if x.startswith("sparse_vs_default_ce_delta_pct="))
    assert " n=3 " in line and " bytes_seeds=0,2 " in line
    assert "up_MB=2.00/8.00(x0.250)" in line and "down_MB=2.00/6.00(x0.333) " in line and line.endswith("total=x0.286")


def test_no_line_without_both_arms():
    runs = [fake("sync", 0, 2.0, up=1e6, learners=1), fake("sparse", 0, 2.1, up=1e6, broadcast=1e6, broadcast_q4=3e6)]
    assert not [x for x in lora_task.report(runs, []) if "_vs_" in x]


def test_the_sparse_arm_launches_claim_12s_recipe():
    args = lora_task.parse(["--arms", "sparse", "--seeds", "0"])
    argv = " ".join(lora_task.launch_argv(args, "sparse", 0, "r"))
    assert ("--codec-up topk4 --codec-down topk8 --feedback-decay 0.8 --outer-lr 1.0 --outer-momentum 0.0 "
            "--merge-alpha 0.0") in argv
    assert "--gpu local:1xcpu,local:1xcpu" in argv and "--shard" not in argv
