"""`yeto launch --codec topk2` runs two real local islands end to end: sparse pushes and sparse broadcast deltas on
the wire, rounds merged, the run finalized."""
from __future__ import annotations

import pytest

from e2e_stack import Stack

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(240)
def test_a_run_with_the_sparse_codec_both_ways_trains_two_local_islands_to_the_end(tmp_path, material):
    s = Stack(tmp_path / "home", material["model"], material["data"])
    try:
        s.launch("sparse", "--codec", "topk2", "--max-steps", "24")
        s.finish("sparse", timeout=220)
        (launch,) = s.events("sparse", "RunLaunched")
        sync = launch["recipe"]["train"]["sync"]
        assert (sync["codec_up"], sync["codec_down"]) == ("topk2", "topk2")
        merged = s.events("sparse", "RoundMerged")
        assert len(merged) >= 4 and {r for e in merged for r in e["responders"]} >= {"island-0", "island-1"}
        assert not [e for e in s.events("sparse", "LearnerRejected")]
        assert [e["reason"] for e in s.events("sparse", "RunFinalized")] == ["max_steps"]
    finally:
        s.down()
