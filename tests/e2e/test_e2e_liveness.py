"""Liveness in seconds, for real: a learner killed, then one frozen; the survivor merges on within a recipe bound.

One two-learner run on a real local stack, in file order: island 1 killed with
SIGKILL (`yeto chaos kill`), then, once its replacement merges, island 0 frozen (SIGSTOP: its TCP connection stays
up and nothing from it arrives, as over a black-holed link), then `yeto down` while it is frozen. Each time the
survivor's next merged global version, a round the lost learner is not in, must come within a bound derived from
the run's recipe (not after `learner_timeout_s`, 60 s, nor after a replacement joins), and the final cut must not
wait on the frozen learner beyond the finalizer's acknowledgement bound. Besides, the server's own ping drops a
peer that went silent within seconds."""
from __future__ import annotations

import math
import signal
import socket
import time
from datetime import datetime

import pytest

from e2e_stack import TRAIN_FLAGS, Stack
from yeto.infra.nats.server import NatsServer
from yeto.services.launcher.api import LocalBackend

pytestmark = [pytest.mark.slow]
RUN = "liveness"
TURN_S = 1.0         # the syncer's data plane looks at the launcher's word at least this often (DataPlane.timeout)
CPU_SLACK_S = 2.0    # two shared cores: the syncer, the launcher, the survivor and a replacement's start-up
FINAL_ACK_S = 15.0   # the run's --final-ack-timeout (the default 30 s would be sat through for the frozen learner)
DRAIN_S = 15.0       # the syncer's final cut waits at most this for pushes still in the stream (final_cut.drain)


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts).timestamp()


def recipe_bound_s(s: Stack, survivor: str, *, silent: bool) -> float:
    """What a round may wait once a learner is lost: its silence bound when nobody reported it gone (liveness.py:
    4 push gaps at its step time, at least 3 s), then the survivor's next push (ceil(H/P) steps apart at its step
    time; two gaps for one caught mid-flight), the grace window, one data plane turn, and CPU slack."""
    (launched,) = s.events(RUN, "RunLaunched")
    grace_max_s = launched["recipe"]["train"].get("sync", {}).get("grace_max_s", 1.0)
    flags = dict(zip(TRAIN_FLAGS[::2], TRAIN_FLAGS[1::2]))
    gap_steps = math.ceil(int(flags["--sync-every"]) / int(flags["--fragments"]))
    recent = s.events(RUN, "LearnerProgress")[-20:]
    step_s = max(e["step_time_s"] for e in recent)
    silence = max(3.0, 4 * gap_steps * step_s) if silent else 0.0
    return silence + TURN_S + grace_max_s + 2 * gap_steps * step_s + CPU_SLACK_S


def merged_without(s: Stack, lost: str, *, after_seq: int) -> dict:
    """The first round merged after `after_seq` that `lost` is not in, once its global version is published."""
    def found(evs):
        merged = next((e for e in evs if e["type"] == "RoundMerged" and lost not in e["responders"]), None)
        return merged and any(e["type"] == "GlobalVersionPublished" and e["seq"] > merged["seq"]
                              and (e["fragment"], e["global_version"]) == (merged["fragment"], merged["global_version"])
                              for e in evs)
    evs = s.wait_for(RUN, f"a global version merged without {lost}", found, "RoundMerged", "GlobalVersionPublished",
                     after_seq=after_seq, timeout=90)
    merged = next(e for e in evs if e["type"] == "RoundMerged" and lost not in e["responders"])
    return next(e for e in evs if e["type"] == "GlobalVersionPublished" and e["seq"] > merged["seq"]
                and (e["fragment"], e["global_version"]) == (merged["fragment"], merged["global_version"]))


def last_seq(s: Stack) -> int:
    return s.sql("select max(seq) m from events")[0]["m"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, material):
    s = Stack(tmp_path_factory.mktemp("liveness") / "home", material["model"], material["data"])
    s.launch(RUN, "--max-steps", "100000", "--final-ack-timeout", f"{FINAL_ACK_S:g}s")   # it ends at `yeto down`
    try:
        s.wait_for(RUN, "two rounds merged from both learners",
                   lambda evs: sum({"island-0", "island-1"} <= set(e["responders"]) for e in evs) >= 2, "RoundMerged")
        yield s
    finally:
        for gen in range(3):                            # a frozen group must be able to die with the stack
            LocalBackend(s.home).stop(RUN, 0, gen, "", sig=signal.SIGCONT)
        s.down()


@pytest.mark.timeout(200)
def test_a_killed_learner_stops_counting_at_once_and_the_survivor_merges_within_seconds(run):
    seq = last_seq(run)
    out = run.yeto("chaos", "kill", RUN, "1")
    assert out.returncode == 0 and "killed island 1 generation 0" in out.stdout, out.stdout + out.stderr
    published = merged_without(run, "island-1", after_seq=seq)
    gone = min((e for e in run.events(RUN, "IslandExited", "IslandPreempted", after_seq=seq) if e["island"] == 1),
               key=lambda e: e["seq"])
    joined = [e for e in run.events(RUN, "LearnerJoined", after_seq=seq) if e["seq"] < published["seq"]]
    took, bound = epoch(published["ts"]) - epoch(gone["ts"]), recipe_bound_s(run, "island-0", silent=False)
    print(f"island 1 killed: {gone['type']} -> fragment {published['fragment']} v{published['global_version']} "
          f"published without it {took:.2f}s later (bound {bound:.2f}s)")
    assert not joined, f"the replacement joined first: this round proves nothing about liveness {joined}"
    assert gone["seq"] < published["seq"] and took <= bound, (gone, published, bound)
    run.wait_for(RUN, "island 1's replacement merging", lambda evs: any(
        "island-1" in e["responders"] for e in evs if e["seq"] > published["seq"]), "RoundMerged", after_seq=seq)


@pytest.mark.timeout(360)
def test_a_frozen_learner_is_silent_within_seconds_and_neither_rounds_nor_the_final_cut_wait_on_it(run):
    seq, backend = last_seq(run), LocalBackend(run.home)
    gen = backend.current_generation(RUN, 0)
    frozen_at = time.time()
    backend.stop(RUN, 0, gen, "", sig=signal.SIGSTOP)   # the processes live on, silent: the launcher sees them run
    published = merged_without(run, "island-0", after_seq=seq)
    took, bound = epoch(published["ts"]) - frozen_at, recipe_bound_s(run, "island-1", silent=True)
    print(f"island 0 frozen -> fragment {published['fragment']} v{published['global_version']} published without it "
          f"{took:.2f}s later (bound {bound:.2f}s)")
    assert took <= bound, (published, bound)
    assert not run.events(RUN, "IslandExited", "IslandPreempted", after_seq=seq), "heartbeats alone found it"
    asked = time.monotonic()
    down = run.yeto("down", RUN)
    assert down.returncode == 0, down.stdout + down.stderr
    output = run.finish(RUN, timeout=FINAL_ACK_S + 150)   # + building the artifact, on two shared cores
    assert "run finalized (user)" in output, output
    (final,) = run.events(RUN, "RunFinalized")
    assert final["acked"] == ["island-1"] and final["missing_acks"] == ["island-0"], final
    (requested,), (cut,) = run.events(RUN, "FinalCutRequested"), run.events(RUN, "FinalCutDone")
    (marked,), (written,) = run.events(RUN, "CheckpointMarkedFinal"), run.events(RUN, "ArtifactWritten")
    cut_s, acks_s = epoch(cut["ts"]) - epoch(requested["ts"]), epoch(written["ts"]) - epoch(marked["ts"])
    print(f"final cut with island 0 frozen: the syncer's cut {cut_s:.2f}s after the request, the artifact {acks_s:.1f}s "
          f"after the checkpoint was marked final (acknowledgements wait at most {FINAL_ACK_S:.0f}s, then it is built), "
          f"the run finalized {time.monotonic() - asked:.1f}s after `yeto down`")
    assert cut_s <= DRAIN_S, "the syncer's final cut does not wait on learners beyond its drain bound"


@pytest.mark.timeout(60)
def test_the_server_drops_a_peer_gone_silent_within_seconds(tmp_path):
    """A client that stops answering (a dead or black-holed peer) is closed by nats-server's own pings: 2 s apart,
    at most 3 unanswered (infra/nats/server.py), so within 5 ping intervals of its last byte."""
    with NatsServer(tmp_path) as server:
        host, port = server.url.rsplit("//", 1)[1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            reader = sock.makefile("rb")
            assert reader.readline().startswith(b"INFO ")
            sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
            assert reader.readline() == b"PONG\r\n"
            quiet_from = time.monotonic()
            received = reader.read()                    # until the server closes the connection: we never answer
            took = time.monotonic() - quiet_from
    print(f"silent peer dropped by nats-server after {took:.1f}s")
    assert b"Stale Connection" in received and took <= 5 * 2.0 + CPU_SLACK_S, (received, took)

