"""Reliability of the real system: one two-island LoRA run on a real local stack takes, in turn, a kill -9 of
the syncer, of a learner island, of the launcher and the finalizer, and of nats-server, each followed by what
an operator does (`stack.up`, which restarts what died); then `yeto down` must still finalize it, with a tape
whose sequence numbers have no hole and whose versions never go back. The tests run in file order on the one
run (a run is ~10 s of process start-up, so four separate runs would quadruple the cost)."""
from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from e2e_checks import round_versions
from e2e_stack import Stack

pytestmark = [pytest.mark.slow]
RUN = "faults"


def with_both(evs: list[dict]) -> list[dict]:
    return [e for e in evs if {"island-0", "island-1"} <= set(e["responders"])]


def last_seq(s: Stack) -> int:
    return s.sql("select max(seq) m from events")[0]["m"]


def started_seq(s: Stack, pid: int, timeout: float = 60) -> int:
    """The stream position of the ServiceStarted of the process `pid` (waits for it on the tape)."""
    rows = s.until(RUN, f"a ServiceStarted from pid {pid}", lambda: s.sql(
        f"select seq from events where type = 'ServiceStarted' and (payload->>'pid')::int = {pid}"), timeout=timeout)
    return rows[0]["seq"]


def leapt_versions(restored: list[dict]) -> dict[int, set[int]]:
    """fragment -> the versions a restore may leave without a RoundMerged or GlobalVersionPublished: a syncer killed
    after broadcasting version P and before its snapshot of P was durable is restored from an older snapshot S as
    version P + 1, a keyframe (core.restore: no version number names two values). P + 1 merged nothing and its
    keyframe has only the FragmentRestored; P's own events may be missing when the kill fell between its broadcast
    and them. A restore without a leap (global_version == snapshot_version) allows nothing."""
    out: dict[int, set[int]] = {}
    for r in restored:
        if r["global_version"] != r["snapshot_version"]:
            assert r["global_version"] == r["published_version"] + 1, r     # a leap goes one past what went out
            out.setdefault(r["fragment"], set()).update({r["published_version"], r["global_version"]})
    return out


def version_story(s: Stack, p: int, first: int = 60) -> list[tuple]:
    """The first rows of what the tape says about fragment p's versions, and every row it could not parse: what a
    failed version check needs to tell a lost publish, a restore's leap and a rejected payload apart."""
    rows = s.sql("select seq, type, source, payload from events where type = 'unparsable' or (type in "
                 "('RoundMerged', 'RoundAborted', 'GlobalVersionPublished', 'FragmentRestored', 'SnapshotWritten', "
                 f"'ServiceStarted') and payload like '%syncer%') order by seq limit {4 * first}")
    story = []
    for r in rows:
        e = json.loads(r["payload"]) if r["type"] != "unparsable" else {"raw": r["payload"][:200]}
        if e.get("fragment", p) != p or (r["type"] == "SnapshotWritten" and str(p) not in e.get("versions", {})):
            continue
        keep = ("global_version", "snapshot_version", "published_version", "versions", "pid", "raw")
        story.append((r["seq"], r["type"], r["source"], {k: e[k] for k in keep if k in e}))
    return story[:first]


def seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


@pytest.fixture(scope="module")
def run(tmp_path_factory, material):
    s = Stack(tmp_path_factory.mktemp("faults") / "home", material["model"], material["data"])
    # An operator restarts what these tests kill (`stack.up`), with no watchdog beside (its own restarts of a run's
    # services: tests/infra/test_infra_watchdog.py)
    s.env["YETO_WATCHDOG"] = "0"
    s.launch(RUN, "--max-steps", "100000")             # it ends when the test says `yeto down`
    try:
        s.wait_for(RUN, "two rounds merged from both learners", lambda evs: len(with_both(evs)) >= 2, "RoundMerged")
        yield s
    finally:
        s.down()


@pytest.mark.timeout(200)
def test_syncer_killed_mid_run_resumes_from_its_snapshots_without_a_version_going_back(run):
    old = run.kill9("syncer")
    killed_at = time.monotonic()
    new = run.up()["pids"]["syncer"]
    assert new != old
    seq = started_seq(run, new)                         # all the old syncer published lies before this
    after = run.wait_for(RUN, "rounds of both fragments merged by the restarted syncer",
                         lambda evs: {0, 1} <= {e["fragment"] for e in with_both(evs)}, "RoundMerged", after_seq=seq)
    print(f"syncer kill -9 -> rounds merged by both learners again {time.monotonic() - killed_at:.1f}s later")
    before = [e for e in run.events(RUN, "RoundMerged") if e["seq"] < seq]
    last = {p: vs[-1] for p, vs in round_versions(before).items()}
    # Resumed at its snapshot's version, or one past the newest version that went out when that snapshot (written
    # after its broadcast) was not durable yet: never back, never a version number twice.
    resumed = {e["fragment"]: e for e in run.events(RUN, "FragmentRestored") if e["seq"] > seq}
    assert set(resumed) == {0, 1}, resumed
    for p, vs in round_versions(after).items():
        r = resumed[p]
        assert r["published_version"] >= last[p] and r["global_version"] in (last[p], r["published_version"] + 1), r
        assert vs[0] == r["global_version"] + 1, f"fragment {p}: last before the kill {last[p]}, {r}, first after {vs[0]}"
    log = (run.home / "logs" / "syncer.log").read_text()
    assert f"run {RUN}: resumed 2 fragments from snapshots" in log, log[-2000:]


@pytest.mark.timeout(150)
def test_learner_island_killed_is_replaced_and_its_new_generation_contributes_within_a_minute(run):
    seq = last_seq(run)
    out = run.yeto("chaos", "kill", RUN, "1")
    assert out.returncode == 0 and "killed island 1 generation 0" in out.stdout, out.stdout + out.stderr
    evs = run.wait_for(RUN, "island 1 replaced, rejoined and merged again", lambda evs: _rejoined(evs, "island-1") is not None,
                       "IslandExited", "IslandPreempted", "IslandReplaced", "LearnerJoined", "LearnerProgress",
                       "RoundMerged", after_seq=seq)
    replaced, merged = _rejoined(evs, "island-1")
    exited = next(e for e in evs if e["type"] == "IslandExited" and e["island"] == 1)
    assert exited["exit_code"] is None and "killed" in exited["detail"]
    assert any(e["type"] == "IslandPreempted" and e["island"] == 1 and e["generation"] == 0 for e in evs)
    assert replaced["generation"] == 1 and replaced["previous_generation"] == 0
    ttfc = seconds(replaced["ts"], merged["ts"])
    print(f"island 1: killed -> replaced {seconds(exited['ts'], replaced['ts']):.1f}s, "
          f"replaced -> first merged contribution {ttfc:.1f}s "
          f"(RoundMerged v{merged['global_version']} of fragment {merged['fragment']})")
    assert ttfc < 60, f"time to first merged contribution {ttfc:.1f}s"
    # the new generation continues its predecessor (step and data shard), it does not start over at step 0
    before = max(e["step"] for e in run.events(RUN, "LearnerProgress")
                 if e["learner"] == "island-1" and e["generation"] == 0)
    first = min(e["step"] for e in evs if e["type"] == "LearnerProgress" and e["learner"] == "island-1"
                and e["generation"] == 1)
    assert first > before > 0, (before, first)


def _rejoined(evs: list[dict], learner: str):
    """(IslandReplaced, first RoundMerged listing the learner after its new generation joined and trained)."""
    island = int(learner.rsplit("-", 1)[1])
    replaced = next((e for e in evs if e["type"] == "IslandReplaced" and e["island"] == island), None)
    if replaced is None:
        return None
    gen = replaced["generation"]
    trained = next((e["seq"] for e in evs if e["type"] == "LearnerProgress" and e["learner"] == learner
                    and e["generation"] == gen), None)
    joined = next((e["seq"] for e in evs if e["type"] == "LearnerJoined" and e["learner"] == learner
                   and e["generation"] == gen), None)
    if trained is None or joined is None:
        return None
    merged = next((e for e in evs if e["type"] == "RoundMerged" and e["seq"] > max(trained, joined)
                   and learner in e["responders"]), None)
    return None if merged is None else (replaced, merged)


@pytest.mark.timeout(150)
def test_launcher_and_finalizer_killed_restart_and_carry_on_from_the_event_stream(run):
    seq = last_seq(run)
    run.kill9("launcher")
    run.kill9("finalizer")
    out = run.yeto("chaos", "kill", RUN, "0")          # dies while no launcher watches
    assert out.returncode == 0, out.stdout + out.stderr
    assert run.island_ended(RUN, 0) == 0               # gone before a launcher is back: it must find out by itself
    pids = run.up()["pids"]
    evs = run.wait_for(RUN, "island 0 replaced by the restarted launcher and merging again",
                       lambda evs: _rejoined(evs, "island-0") is not None,
                       "IslandReplaced", "LearnerJoined", "LearnerProgress", "RoundMerged", after_seq=seq)
    assert [(e["island"], e["generation"]) for e in evs if e["type"] == "IslandReplaced"] == [(0, 1)]
    gens = sorted(p.name for p in (run.home / "runs" / RUN / "islands" / "0").iterdir())
    assert gens == ["g0", "g1"], f"island 0 generations started: {gens} (a restarted launcher must not spawn twice)"
    started_seq(run, pids["launcher"])
    started_seq(run, pids["finalizer"])


@pytest.mark.timeout(200)
def test_nats_server_killed_and_restarted_loses_nothing_and_yeto_down_still_finalizes(run):
    seq = last_seq(run)
    at_restart = {p: vs[-1] for p, vs in round_versions(run.events(RUN, "RoundMerged")).items()}
    pids = dict(run.up()["pids"])
    run.kill9("nats-server")
    run.server_port_closed()                           # the restart binds the same port again
    again = run.up()
    assert again["pids"]["nats-server"] != pids["nats-server"]
    others = {k: v for k, v in pids.items() if k != "nats-server"}
    assert {k: v for k, v in again["pids"].items() if k != "nats-server"} == others, \
        "stack.up after a nats-server crash must keep the live components (they reconnect), not start second copies"
    # Pushes based on versions from before the restart are admitted only up to max_base_lag (4) versions
    # later: 6 versions past the kill on both fragments prove the learners receive new globals again.
    restarted = time.monotonic()
    run.wait_for(RUN, "6 more versions of both fragments merged by both learners after the nats-server restart",
                 lambda evs: all(any(e["fragment"] == p and e["global_version"] >= v + 6 for e in with_both(evs))
                                 for p, v in at_restart.items()), "RoundMerged", after_seq=seq, timeout=90)
    print(f"nats-server kill -9 -> 6 versions on after {time.monotonic() - restarted:.1f}s")
    down = run.yeto("down", RUN)
    assert down.returncode == 0, down.stdout + down.stderr
    output = run.finish(RUN, timeout=120)          # the --wait follower lived through the restart
    assert "run finalized (user)" in output, output
    (final,) = run.events(RUN, "RunFinalized")
    assert sorted(final["acked"]) == ["island-0", "island-1"], final    # both live learners acknowledged the cut
    on_stream = round_versions(run.stream_events(RUN, "RoundMerged"))      # to tell a lost publish from a lost write
    run.down()
    # The tape file itself, read with the stack down.
    (span,) = run.sql("select min(seq) lo, max(seq) hi, count(*) n, count(distinct seq) d from events")
    assert span["lo"] == 1 and span["n"] == span["d"] == span["hi"], f"the tape has holes or repeats: {span}"
    merged = run.events(RUN, "RoundMerged")
    leaps = leapt_versions(run.events(RUN, "FragmentRestored"))
    for p, vs in round_versions(merged).items():
        # Every version from 1 on, in order, each once, but for what a restore leapt over (test 1's syncer kill
        # between a round's broadcast and its snapshot: core.restore); nothing else may be missing.
        assert vs == sorted(set(vs)) and set(range(1, vs[-1] + 1)) - set(vs) <= leaps.get(p, set()), (
            f"fragment {p}: versions on the tape {vs}; on the event stream before `stack down` {on_stream.get(p)}; "
            f"a restore's leap may skip only {sorted(leaps.get(p, set()))}; its story on the tape: {version_story(run, p)}")
    assert round_versions(merged) == on_stream, "the tape and the event stream disagree on the rounds merged"
    for p, vs in round_versions(run.events(RUN, "GlobalVersionPublished")).items():
        assert vs == sorted(set(vs)) and set(range(vs[-1] + 1)) - set(vs) <= leaps.get(p, set()), \
            f"fragment {p}: published versions {vs}; a restore's leap may skip only {sorted(leaps.get(p, set()))}"
    assert [e["type"] for e in run.events(RUN, "RunFinalized", "RunFailed", "RunStopped")] == ["RunFinalized"]
    log = (run.home / "logs" / "syncer.log").read_text()
    assert "pushes still unread" not in log, "the final cut waited out its drain timeout: " + log[-1500:]
