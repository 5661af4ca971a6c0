"""Liveness in seconds, for real: two learners on a real local stack, one killed with SIGKILL (`yeto chaos kill`).
The survivor's next merged global version, a round the dead learner is not in, must come within a bound derived
from the run's recipe after the launcher reports the island gone, not after `learner_timeout_s` (60 s) nor after
its replacement joins (which takes longer than that bound here: a fresh process imports torch and loads the model)."""
from __future__ import annotations

import math
from datetime import datetime

import pytest

from e2e_stack import TRAIN_FLAGS, Stack

pytestmark = [pytest.mark.slow]
RUN = "liveness"
TURN_S = 1.0        # the syncer's data plane looks at the launcher's word at least this often (DataPlane.timeout)
CPU_SLACK_S = 2.0   # two shared cores: the syncer, the launcher, the survivor and the replacement's start-up


def seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def bound_s(s: Stack, survivor: str) -> float:
    """After the island is reported gone, a round waits at most for the survivor's next push (its pushes are ceil(H/P)
    steps apart at its step time; two gaps for a push caught mid-flight), the grace window, and one data plane turn."""
    (launched,) = s.events(RUN, "RunLaunched")
    sync = launched["recipe"]["train"].get("sync", {})
    flags = dict(zip(TRAIN_FLAGS[::2], TRAIN_FLAGS[1::2]))
    gap_steps = math.ceil(int(flags["--sync-every"]) / int(flags["--fragments"]))
    step_s = max(e["step_time_s"] for e in s.events(RUN, "LearnerProgress")[-10:] if e["learner"] == survivor)
    return TURN_S + sync.get("grace_max_s", 1.0) + 2 * gap_steps * step_s + CPU_SLACK_S


@pytest.mark.timeout(300)
def test_a_killed_learner_stops_counting_and_the_survivor_merges_a_new_global_within_seconds(tmp_path, material):
    s = Stack(tmp_path / "home", material["model"], material["data"])
    s.launch(RUN, "--max-steps", "100000")              # it ends when the test takes the stack down
    try:
        s.wait_for(RUN, "two rounds merged from both learners",
                   lambda evs: sum({"island-0", "island-1"} <= set(e["responders"]) for e in evs) >= 2, "RoundMerged")
        seq = s.sql("select max(seq) m from events")[0]["m"]
        out = s.yeto("chaos", "kill", RUN, "1")
        assert out.returncode == 0 and "killed island 1 generation 0" in out.stdout, out.stdout + out.stderr
        evs = s.wait_for(RUN, "the launcher reports island 1 gone, then a round merged without it",
                         lambda evs: _after_gone(evs) is not None, "IslandExited", "IslandPreempted", "RoundMerged",
                         "GlobalVersionPublished", "LearnerJoined", after_seq=seq, timeout=90)
        gone, merged, published = _after_gone(evs)
        took, bound = seconds(gone["ts"], published["ts"]), bound_s(s, "island-0")
        rejoined = [e for e in evs if e["type"] == "LearnerJoined" and e["learner"] == "island-1" and e["seq"] < merged["seq"]]
        print(f"island 1 reported gone ({gone['type']}) -> fragment {merged['fragment']} v{merged['global_version']} "
              f"merged by {merged['responders']} and published {took:.2f}s later (bound {bound:.2f}s)")
        assert merged["responders"] == ["island-0"] and not rejoined, (merged, rejoined)
        assert took <= bound, f"the survivor's next global came {took:.2f}s after {gone['type']}, bound {bound:.2f}s"
    finally:
        s.down()


def _after_gone(evs: list[dict]):
    """(the launcher's first word that island 1 is gone, the first round merged after it without island 1, its
    GlobalVersionPublished), or None while they are not all on the tape."""
    gone = next((e for e in evs if e["type"] in ("IslandExited", "IslandPreempted") and e["island"] == 1), None)
    if gone is None:
        return None
    merged = next((e for e in evs if e["type"] == "RoundMerged" and e["seq"] > gone["seq"]
                   and "island-1" not in e["responders"]), None)
    if merged is None:
        return None
    published = next((e for e in evs if e["type"] == "GlobalVersionPublished" and e["seq"] > merged["seq"]
                      and (e["fragment"], e["global_version"]) == (merged["fragment"], merged["global_version"])), None)
    return None if published is None else (gone, merged, published)
