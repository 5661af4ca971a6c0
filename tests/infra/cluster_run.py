"""A run on a three-node cluster stack, for test_infra_cluster.py: faults by the pids stack.json records, then the
event stream compared with the tape. Builds on the end-to-end tests' Stack (tests/e2e/e2e_stack.py)."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from e2e_checks import round_versions
from e2e_stack import Stack
from waiting import wait_for
from yeto.infra import stack
from yeto.infra.bus import connect
from yeto.infra.stack import zygote as stack_zygote
from yeto.schemas.subjects import EVERY_EVENT, EVT_STREAM

SCALED = ("planner", "launcher", "finalizer")


def with_both(evs: list[dict]) -> list[dict]:
    return [e for e in evs if {"island-0", "island-1"} <= set(e["responders"])]


async def leaders(url: str) -> tuple[str, str] | None:
    """The server names of the nodes leading YETO_EVT and the tape writer's durable consumer on it (None while
    either is being elected)."""
    bus = await connect(url, name="test-leader")
    try:
        stream = (await bus.js.stream_info(EVT_STREAM)).cluster.leader
        tape = (await bus.js.consumer_info(EVT_STREAM, "tape")).cluster.leader
        return (stream, tape) if stream and tape else None
    except Exception:  # noqa: BLE001 - no leader right now: not yet
        return None
    finally:
        await bus.close()


async def stream_events(url: str) -> list[tuple[int, str]]:
    """(sequence, event id) of every message in YETO_EVT, read from the stream itself."""
    bus = await connect(url, name="test-stream")
    try:
        last = (await bus.js.stream_info(EVT_STREAM)).state.last_seq
        events = await bus.consumer([EVERY_EVENT], ack=False)
        out: list[tuple[int, str]] = []
        while not out or out[-1][0] < last:
            out += [(d.seq, json.loads(d.data)["id"]) for d in await events.fetch(1000, 2.0) if d.seq <= last]
        await events.close()
        return out
    finally:
        await bus.close()


class ClusterRun(Stack):
    def __init__(self, home: Path, material: dict):
        super().__init__(home, material["model"], material["data"])
        started = time.monotonic()
        # no watchdog: the run must outlive a node and an instance of each service that stay dead (and `stack.up`
        # restarts the syncer by hand); the watchdog's restarts: tests/infra/test_infra_watchdog.py
        self.rec = stack.up(home, cluster=3, watch=False)
        print(f"stack up --cluster 3: {time.monotonic() - started:.1f}s")
        self.url = self.rec["url"]
        self.kill_seq, self.dead = 0, list[str]()     # the tape's last seq before the kills, what was killed

    def merged_after(self, run: str, seq: int, what: str, more: int) -> None:
        """Wait until both fragments merged `more` versions past their last before `seq`, from both learners."""
        base = {p: vs[-1] for p, vs in round_versions(self.events(run, "RoundMerged")).items()}
        started = time.monotonic()
        self.wait_for(run, what, lambda evs: all(any(e["fragment"] == p and e["global_version"] >= v + more
                                                     for e in with_both(evs)) for p, v in base.items()),
                      "RoundMerged", after_seq=seq, timeout=300)
        print(f"{what}: {time.monotonic() - started:.1f}s")

    def last_seq(self) -> int:
        return self.sql("select max(seq) m from events")[0]["m"]

    def start_and_kill_faults(self, run: str) -> None:
        assert set(self.rec["pids"]) == {f"nats-server-{k}" for k in range(3)} | {"tape", "syncer", stack_zygote.NAME} | {
            f"{s}-{k}" for s in SCALED for k in range(2)}
        self.launch(run, "--max-steps", "100000")            # it ends when the test says `yeto down`
        self.wait_for(run, "two rounds merged from both learners", lambda evs: len(with_both(evs)) >= 2,
                      "RoundMerged", timeout=300)
        # The syncer runs once per shard (two would split a shard's pushes): a supervisor restarts it, here stack.up.
        others = {n: p for n, p in self.rec["pids"].items() if n != "syncer"}
        self.kill9("syncer")
        again = stack.up(self.home)["pids"]
        assert {n: p for n, p in again.items() if n != "syncer"} == others, "stack.up restarts only what died"
        self.merged_after(run, self.last_seq(), "syncer kill -9 -> 2 versions on", more=2)
        # The node leading the tape's consumer (the mirror that must lose nothing), and one instance of each doubled
        # service; none of them restarted.
        stream, tape = wait_for(lambda: asyncio.run(leaders(self.url)), 30, f"leaders of {EVT_STREAM} and its tape consumer")
        victim = f"nats-server-{tape.rsplit('-', 1)[1]}"
        seq = self.kill_seq = self.last_seq()
        for name in (victim, *(f"{s}-0" for s in SCALED)):
            self.kill9(name)
        print(f"killed {victim} (leader of the tape consumer{f' and of {EVT_STREAM}' if stream == tape else ''}) and "
              + ", ".join(f"{s}-0" for s in SCALED))
        now = wait_for(lambda: (found := asyncio.run(leaders(self.url))) and tape not in found and found, 60,
                       f"other nodes to lead {EVT_STREAM} and the tape consumer after {tape} died")
        print(f"{EVT_STREAM} now led by {now[0]}, the tape consumer by {now[1]}")
        # Pushes on versions from before the kill are admitted up to max_base_lag (4) versions later: 6 more on both
        # fragments prove the learners receive new globals through the surviving nodes.
        self.merged_after(run, seq, "node and instances kill -9 -> 6 versions on", more=6)
        self.dead = [victim, *(f"{s}-0" for s in SCALED)]

    def finalize_and_check(self, run: str) -> None:
        down = self.yeto("down", run)                         # StopRun, StopIsland: handled by the surviving instances
        assert down.returncode == 0, down.stdout + down.stderr
        output = self.finish(run, timeout=300)
        assert "run finalized (user)" in output, output
        # `launch --wait` follows the stream; the tape writes it behind (after a failover of its consumer, seconds)
        (final,) = self.until(run, "RunFinalized on the tape", lambda: self.events(run, "RunFinalized"))
        assert sorted(final["acked"]) == ["island-0", "island-1"], final
        status = stack.status(self.home)
        assert status and not any(status[n] for n in self.dead), f"a killed process came back: {status}"
        # Nothing lost: the tape holds exactly the stream's events, in its order, with no hole.
        stream = asyncio.run(stream_events(self.url))
        self.until(run, "the tape to reach the stream's last event", lambda: self.last_seq() >= stream[-1][0])
        rows = self.sql(f"select seq, payload->>'id' id from events where seq <= {stream[-1][0]} order by seq")
        assert [(r["seq"], r["id"]) for r in rows] == stream, "the tape and the replicated stream differ"
        assert [s for s, _ in stream] == list(range(1, len(stream) + 1)), "the stream has a hole"
        # Every version merged and published once, in order, but a leap: a syncer killed after a round's broadcast
        # and before its snapshot was durable resumes from the older snapshot under a version past the one that
        # went out (FragmentRestored's global_version > published_version), sent as a keyframe, not merged.
        leaps: dict[int, set[int]] = {}
        for e in self.events(run, "FragmentRestored"):
            if e["global_version"] > e["published_version"]:
                leaps.setdefault(e["fragment"], set()).add(e["global_version"])
        for p, vs in round_versions(self.events(run, "RoundMerged")).items():
            assert vs == [v for v in range(1, vs[-1] + 1) if v not in leaps.get(p, ())], \
                f"fragment {p}: merged versions {vs}, leaps {leaps}"
        for p, vs in round_versions(self.events(run, "GlobalVersionPublished")).items():
            assert vs == [v for v in range(vs[-1] + 1) if v not in leaps.get(p, ())], \
                f"fragment {p}: published versions {vs}, leaps {leaps}"
        print(f"leaps: {leaps}")
        steps: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for e in self.events(run, "LearnerProgress"):
            steps.setdefault((e["learner"], e["generation"]), []).append((e["seq"], e["step"]))
        assert sorted(steps) == [("island-0", 0), ("island-1", 0)], sorted(steps)   # no island was lost on the way
        for key, ss in steps.items():
            assert [s for _, s in ss] == sorted({s for _, s in ss}), f"{key}: progress steps {ss}"
            assert ss[-1][0] > self.kill_seq, f"{key}: no progress after the kills: {ss}"
        print(f"{len(stream)} events on the stream and the tape; progress reports {[len(s) for s in steps.values()]}")


async def stream_messages(url: str) -> int | None:
    """How many messages YETO_EVT holds (None while it has no leader to answer)."""
    bus = await connect(url, name="test-count")
    try:
        return (await bus.js.stream_info(EVT_STREAM)).state.messages
    except Exception:  # noqa: BLE001 - a leader being elected: not yet
        return None
    finally:
        await bus.close()


async def replicas_current(url: str) -> bool:
    """Every stream has a leader and all its other copies are online and current (a rejoined node has caught up)."""
    from yeto.schemas.subjects import STREAMS

    bus = await connect(url, name="test-replicas")
    try:
        for spec in STREAMS:
            cluster = (await bus.js.stream_info(spec.name)).cluster
            peers = cluster.replicas or []
            if not cluster.leader or len(peers) != 2 or not all(p.current and not p.offline for p in peers):
                return False
        return True
    except Exception:  # noqa: BLE001 - a stream without a leader right now: not yet
        return False
    finally:
        await bus.close()
