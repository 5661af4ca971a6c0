"""A sharded syncer end to end: `yeto stack up --syncers 2` runs two syncer processes (`--shard 0/2`, `1/2`),
each merging only its own fragments on its own durable consumer; each reports its own FinalCutDone, the
finalizer combines both into one final cut, and the artifact (built from both shards' keyframes) beats the
base model."""
from __future__ import annotations

from pathlib import Path

import pytest

from e2e_checks import heldout_loss
from e2e_stack import Stack

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(240)
def test_two_syncer_shards_split_the_fragments_and_the_run_finalizes_from_both(tmp_path, material):
    s = Stack(tmp_path / "home", material["model"], material["data"])
    try:
        up = s.yeto("stack", "up", "--syncers", "2")
        assert up.returncode == 0, up.stderr
        assert "syncer-0" in up.stdout and "syncer-1" in up.stdout, up.stdout
        again = s.yeto("stack", "up", "--syncers", "3")
        assert again.returncode != 0 and "yeto stack down" in again.stderr, again.stdout + again.stderr
        s.launch("shards", "--tuning", "full", "--max-steps", "120", "--lr", "1e-3")
        output = s.finish("shards", timeout=200)
        assert "run finalized (max_steps)" in output, output
        merged = s.events("shards", "RoundMerged")
        owners = {(e["fragment"], e["source"]) for e in merged}
        assert owners == {(0, "syncer-0"), (1, "syncer-1")}, owners
        cuts = s.events("shards", "FinalCutDone")
        assert sorted((c["shard"], c["num_shards"], c["source"]) for c in cuts) == [(0, 2, "syncer-0"), (1, 2, "syncer-1")]
        assert [set(c["versions"]) for c in sorted(cuts, key=lambda c: c["shard"])] == [{"0"}, {"1"}]
        (marked,) = s.events("shards", "CheckpointMarkedFinal")
        assert marked["versions"] == {**cuts[0]["versions"], **cuts[1]["versions"]}
        (written,) = s.events("shards", "ArtifactWritten")
        base = heldout_loss(material["model"], None, material["heldout"])
        tuned = heldout_loss(material["model"], Path(written["local_path"]), material["heldout"])
        assert tuned < base - 0.25, f"held-out loss {tuned:.4f} is not clearly below the base model's {base:.4f}"
    finally:
        s.down()
