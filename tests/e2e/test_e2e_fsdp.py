"""FSDP2 islands in a real run: `yeto launch --gpu local:2xcpu --shard fsdp` trains a two-rank FSDP2 island that syncs
(this machine's two CPUs hold no second island beside it); a kill -9 of one FSDP rank is an island failure like any
other: the island comes back as a new generation whose two ranks contribute again, and `yeto down` finalizes the run."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from e2e_stack import Stack
from test_e2e_faults import _rejoined, last_seq

pytestmark = [pytest.mark.slow]
RUN = "fsdp"


@pytest.fixture(scope="module")
def run(tmp_path_factory, material):
    s = Stack(tmp_path_factory.mktemp("fsdp") / "home", material["model"], material["data"])
    s.launch(RUN, "--shard", "fsdp", "--max-steps", "100000", islands="local:2xcpu")
    try:
        s.wait_for(RUN, "two rounds merged from the FSDP island", lambda evs: len(evs) >= 2, "RoundMerged", timeout=240)
        yield s
    finally:
        s.down()


def rank_process(home: Path, island: int, generation: int, rank: int) -> int:
    """The learner process of one rank (the child of the shell wrapper the local backend records, or the recorded
    process itself when the launcher forked it from its zygote)."""
    (group,) = home.glob(f"**/{RUN}/islands/{island}/g{generation}/group.json")
    wrapper = json.loads(group.read_text())["pids"][rank]
    if Path(f"/proc/{wrapper}/cmdline").read_bytes().split(b"\0")[0] != b"sh":
        return wrapper
    children = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    assert len(children) == 1, f"rank {rank}'s wrapper {wrapper} has children {children}"
    return int(children[0])


@pytest.mark.timeout(400)
def test_a_killed_fsdp_rank_fails_its_island_which_is_replaced_and_contributes_and_the_run_finalizes(run):
    seq = last_seq(run)
    victim = rank_process(run.home, 0, 0, rank=1)
    os.kill(victim, signal.SIGKILL)
    evs = run.wait_for(RUN, "island 0 replaced, rejoined and merged again", lambda evs: _rejoined(evs, "island-0") is not None,
                       "IslandExited", "IslandPreempted", "IslandReplaced", "LearnerJoined", "LearnerProgress",
                       "RoundMerged", after_seq=seq, timeout=240)
    exited = next(e for e in evs if e["type"] == "IslandExited" and e["island"] == 0)
    assert "rank" in exited["detail"], exited                 # which rank failed, and how
    replaced, merged = _rejoined(evs, "island-0")
    assert replaced["generation"] == 1 and "island-0" in merged["responders"]
    assert len(json.loads(next(run.home.glob(f"**/{RUN}/islands/0/g1/group.json")).read_text())["pids"]) == 2
    down = run.yeto("down", RUN)
    assert down.returncode == 0, down.stdout + down.stderr
    output = run.finish(RUN, timeout=180)
    assert "run finalized (user)" in output, output
    (written,) = run.events(RUN, "ArtifactWritten")
    assert written["artifact_kind"] == "adapter", written
