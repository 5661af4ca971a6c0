"""A frozen learner on a real local stack with the default recipe: the launcher preempts its island a few paces into
its silence (services/launcher/liveness.py), long before heartbeat_timeout_s, replaces it, and the run finalizes.
The stack's launcher runs with a silence floor of FLOOR_S (its $YETO_SILENCE_FLOOR_S, docs/CONFIG.md) instead of the
default 60 s: a tiny model's pace (8 x 2 s) stays under it, so the floor is the bound, and the preemption names it.

Two islands train a tiny model; once both have merged rounds, island 1's learner process is SIGSTOPped (by its pid:
alive, its TCP connection up, nothing from it arrives, as with a hung collective or a black-holed link). Everything
is read from the tape; the stopped process is killed at the end."""
from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
import learner_tiny
from e2e_stack import Stack
from waiting import wait_for
from yeto.schemas.recipe_sections import Timeouts
from yeto.services.launcher.api import LocalBackend

pytestmark = [pytest.mark.slow]
RUN = "frozen"
MAX_STEPS = 200         # the replacement trains from the frozen island's last step (~12) to here after the floor; 400 took
                        # it 12 s more at load 8-15 (2026-12-06), and the survivor finishes within the floor either way
REASON = re.compile(r"no progress for (\d+)s \(bound (\d+)s: ")
FLOOR_S = 30            # half the default: room for a survivor's pauses on a loaded 2-core CI machine


def learner_pid(home: Path, island: int, generation: int) -> tuple[int, str]:
    """The learner process of a one-rank island generation (the child of the `sh` its group.json records, or the
    recorded process itself when the launcher forked it from its zygote), and its start time (/proc's, to tell it from
    a later process given the same pid)."""
    group = json.loads((LocalBackend(home).gen_dir(RUN, island, generation) / "group.json").read_text())
    rank = group["pids"][0]
    if Path(f"/proc/{rank}/cmdline").read_bytes().split(b"\0")[0] != b"sh":
        return rank, started(rank)
    (pid,) = (int(p) for p in Path(f"/proc/{rank}/task/{rank}/children").read_text().split())
    return pid, started(pid)


def started(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return ""


def gone(pid: int, since: str) -> bool:
    """The process is over: reaped, another process under its pid, or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[19] != since or fields[0] == "Z"


def end(pid: int, since: str) -> None:
    """Kill the process this test stopped (SIGKILL ends a stopped process too), if it is still that process."""
    if not gone(pid, since):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    material = learner_tiny.material(tmp_path_factory.mktemp("material"))
    s = Stack(tmp_path_factory.mktemp("frozen") / "home", material["model"], material["data"])
    s.env["YETO_SILENCE_FLOOR_S"] = str(FLOOR_S)          # the launch that starts the stack gives it to the launcher
    try:
        yield s
    finally:
        s.down()


@pytest.mark.timeout(600)
def test_a_frozen_learner_is_preempted_within_its_pace_bound_replaced_and_the_run_finalizes(stack):
    s = stack
    s.launch(RUN, "--max-steps", str(MAX_STEPS))
    s.wait_for(RUN, "two rounds merged from both learners",
               lambda evs: sum({"island-0", "island-1"} <= set(e["responders"]) for e in evs) >= 2, "RoundMerged",
               timeout=240)
    (launched,) = s.events(RUN, "RunLaunched")
    cap = Timeouts().heartbeat_timeout_s
    assert launched["recipe"]["timeouts"]["heartbeat_timeout_s"] == cap == 300.0, launched["recipe"]["timeouts"]
    pid, since = learner_pid(s.home, 1, 0)
    os.kill(pid, signal.SIGSTOP)
    try:
        (preempt,) = s.wait_for(RUN, "island 1 preempted while frozen", lambda evs: [e for e in evs if e["island"] == 1],
                             "IslandPreempted", timeout=cap - 60)     # before the cap could: the pace rule did it
        silent, bound = (int(x) for x in REASON.match(preempt["reason"]).groups())
        print(f"frozen island 1: {preempt['reason']}")
        assert preempt["generation"] == 0 and silent >= bound and bound < cap, preempt
        assert f"at least {FLOOR_S}s" in preempt["reason"], f"the stack's floor, not the default 60 s: {preempt}"
        s.wait_for(RUN, "island 1's stop and its replacement", lambda evs: {
            (e["type"], e["generation"]) for e in evs if e["island"] == 1} >= {("IslandStopped", 0), ("IslandReplaced", 1)},
            "IslandStopped", "IslandReplaced", timeout=120)
        output = s.finish(RUN, timeout=300)
        assert "run finalized" in output, output
    finally:
        end(pid, since)
    wait_for(lambda: gone(pid, since), 30, f"the frozen learner (pid {pid}) to be gone")
    (final,) = s.events(RUN, "RunFinalized")
    preempted = [(e["island"], e["generation"]) for e in s.events(RUN, "IslandPreempted")]
    steps = {(e["learner"], e["generation"]): e["step"] for e in s.events(RUN, "LearnerProgress")}
    assert preempted == [(1, 0)], f"only the frozen island is preempted, once: {preempted}"
    assert steps[("island-1", 1)] == steps[("island-0", 0)] == MAX_STEPS, steps
    assert final["reason"] == "max_steps", final
