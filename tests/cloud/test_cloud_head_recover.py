"""Mirror mode rehearsed: a cloud run outlives its head. Mid-run, every process of the head's namespace is killed -9
and its folder (the VM's disk) deleted; `yeto recover` (no --output: it takes the run's from its head record) rents
a replacement (a new namespace at a NEW address, as SkyPilot gives, from the same bundle) that restores the run from
the mirror beside --output and is named in the run's rendezvous there; both islands follow the rendezvous to the new
address, are merged again, and, stopped by `yeto down`, the run finalizes with an artifact `yeto verify` accepts. The
tape shows the gap.
Printed: the time from the replacement's namespace start (and from the start of `yeto recover`, which first gives
the old head --probe-s to answer: PROBE_S here, the deleted namespace's address answers nothing whatever the time given,
20 s by default) to its first merged global, and the events the dead head acknowledged after its last
mirror (docs/CLOUD.md, section 10). The store is outside the laptop's folders: the islands read the rendezvous in
it, as cloud islands read a bucket with the credentials SkyPilot copies to them."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

import rehearsal
import rehearsal_jobs
import rehearsal_world
from rehearsal_net import pids
from test_cloud_rehearsal import Laptop
from waiting import wait_for

sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
import learner_tiny

pytestmark = pytest.mark.slow
RUN = "cloud-lost-head"
PROBE_S = "3"       # `yeto recover --probe-s`: a head whose namespace is deleted is lost after any wait (default 20 s)


def sql(laptop: Laptop, query: str) -> list[list[str]]:
    """`yeto sql --run RUN --format csv`'s rows: what the user asks (from the copy once the run has ended)."""
    out = laptop.yeto("sql", "--run", RUN, query, "--format", "csv")
    assert out.returncode == 0, out.stdout + out.stderr
    return [line.split(",") for line in out.stdout.strip().splitlines()[1:]]


def polled(laptop: Laptop, query: str) -> list[list[str]]:
    """The same rows asked of the running head's tape writer from this process, for the test's polls
    (rehearsal_world.tape_rows: no CLI process per poll); [] while none answers (the replacement's tape writer starts
    once the mirror is restored)."""
    head = json.loads((laptop.home / "heads" / RUN / "head.json").read_text())
    return rehearsal_world.tape_rows(head, query, waiting=True) or []


def stream_last_seq(laptop: Laptop, head: dict) -> int:
    """The head's event stream's last sequence, asked as its operator (what it had acknowledged)."""
    async def ask(bus) -> int:
        return (await bus.js.stream_info("YETO_EVT")).state.last_seq
    return rehearsal_world.as_operator(head, ask)


def kill_head(world: Path, cluster: str) -> dict:
    """kill -9 of everything in the head's namespace, then the namespace and its folder; the head's record."""
    rec = rehearsal_world.record(world)["clusters"][cluster]
    for pid in pids(rec["ns"]):
        os.kill(pid, signal.SIGKILL)
    rehearsal.RehearsalSky().down_cluster(cluster)
    shutil.rmtree(rec["dir"])
    return rec


@pytest.fixture
def laptop(rehearsal_dir, tmp_path) -> Laptop:
    root = tmp_path / "laptop"      # the laptop's folders: islands find them empty (the store is beside them)
    rehearsal_world.hide(rehearsal_dir, [root])
    with rehearsal_jobs.locked(rehearsal_dir) as state:
        state["world"]["new_addresses"] = True        # a replacement head gets a new address
    return Laptop(root / "home", rehearsal_dir, learner_tiny.write_model_dir(root / "model"),
                  learner_tiny.write_chat_jsonl(root / "chat.jsonl", 300))


@pytest.mark.timeout(1500)
def test_a_run_whose_head_is_lost_mid_run_resumes_on_a_replacement_from_the_mirror_and_finalizes(laptop):
    from yeto.infra.head import mirror, restore

    output = laptop.home.parent.parent / "bucket" / "artifact"
    # It trains until `yeto down`: a tiny model's 160 steps took 14 s, less than the head's loss and recovery, so
    # a fixed step count let both islands finish (their last pushes refused as stale by the replacement, whose
    # versions leap past the mirror's) before there was a head to merge them, and the test raced the machine's load.
    started = laptop.launch(RUN, "--max-steps", "100000", "--output", str(output), "--yes", timeout=300)
    assert started.returncode == 0, f"{started.stdout}\n{started.stderr}\n{laptop.story()}"
    root = mirror.mirror_root(str(output), RUN)
    merged = lambda: int((polled(laptop, "select count(*) from events where type = 'RoundMerged'") or [[0]])[0][0])  # noqa: E731
    wait_for(lambda: merged() >= 4, 300, "four merged rounds on the first head", interval=1, detail=laptop.story)
    first = wait_for(lambda: (m := mirror.read_manifest(root)) and len(m["snapshots"]) == 2 and m, 60,
                     "a mirror holding both fragments' snapshots", interval=0.5, detail=laptop.story)
    head = json.loads((laptop.home / "heads" / RUN / "head.json").read_text())
    where = Path(root) / "head.json"        # the rendezvous: the first head's mirror wrote its address there
    assert json.loads(where.read_text())["url"] == head["url"], where.read_text()
    acknowledged = stream_last_seq(laptop, head)
    dead = kill_head(laptop.world, head["cluster"])
    killed_at = time.time()
    last = mirror.read_manifest(root)
    assert last["events_through"] >= first["events_through"]
    lost = acknowledged - last["events_through"]
    print(f"head killed: stream at seq {acknowledged}, mirror through {last['events_through']} "
          f"({lost} events acknowledged after the last mirror, mirrored {killed_at - last['mirrored_at']:.1f}s before)")

    new_start = time.time()
    recovered = laptop.yeto("recover", RUN, "--probe-s", PROBE_S, timeout=400)   # --output: from the run's head record
    assert recovered.returncode == 0, f"{recovered.stdout}\n{recovered.stderr}\n{laptop.story()}"
    print(recovered.stdout)
    new = rehearsal_world.record(laptop.world)["clusters"][head["cluster"]]
    assert new["ip"] != dead["ip"] and new["cluster_status"] == "UP"     # a new address, a fresh namespace
    assert json.loads(where.read_text())["url"] == f"tls://{new['ip']}:4222"       # the rendezvous names it
    born = psutil.boot_time() + new["started"]      # its first process's start (seconds since boot, procs.started_at)
    assert new_start <= born + 1

    query = f"select epoch_ms(ts) from events where type = 'RoundMerged' and epoch(ts) > {new_start} order by seq"
    rounds = wait_for(lambda: len(r := polled(laptop, query)) >= 1 and r, 180, "a merged global on the replacement head",
                      interval=0.5, detail=laptop.story)
    to_first_merge = int(rounds[0][0]) / 1000 - born
    print(f"replacement head: first merged global {to_first_merge:.1f}s after its namespace started, "
          f"{int(rounds[0][0]) / 1000 - new_start:.1f}s after `yeto recover` started, "
          f"{int(rounds[0][0]) / 1000 - killed_at:.1f}s after the kill")
    assert to_first_merge <= 120, to_first_merge
    contributors = lambda: polled(laptop, "select distinct unnest(json_extract_string(payload, '$.responders[*]')) "  # noqa: E731
                                       f"from events where type = 'RoundMerged' and epoch(ts) > {new_start}")
    wait_for(lambda: len(contributors()) == 2, 300, "both islands merged on the replacement head", interval=1,
             detail=laptop.story)
    stopped = laptop.yeto("down", RUN)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    finalized = lambda: (polled(laptop, "select count(*) from events where type = 'RunFinalized'") or [[0]])[0][0] == "1"  # noqa: E731
    wait_for(finalized, 900, "the run to finalize on the replacement head", interval=2, detail=laptop.story)
    for island in laptop.islands(RUN):                # each followed the rendezvous to the new address
        log = (Path(island["dir"]) / "run.log").read_text(errors="replace")
        assert f"names tls://{new['ip']}:4222: reconnecting there (was tls://{dead['ip']}:4222)" in log, log[-3000:]
        print(f"{Path(island['dir']).name} followed it once its bus was away "     # the learners' own count
              + ", ".join(re.findall(r"bus away (\d+s); head rendezvous \S+ names", log)))

    pulled = laptop.yeto("pull", RUN, timeout=300)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    verified = laptop.yeto("verify", str(output))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    restored = int(last["events_through"])
    # nothing the mirror held is lost: the tape's first rows are the mirrored events, same sequence, same id
    mirrored = [(str(m["seq"]), m["headers"]["Nats-Msg-Id"]) for seg in sorted((Path(root) / "events").iterdir())
                for m in map(json.loads, seg.read_text().splitlines()) if m["subject"].startswith(f"yeto.evt.{RUN}.")]
    query = f"select seq, payload->>'$.id' from events where run_id = '{RUN}' and seq <= {restored} order by seq"
    assert [tuple(r) for r in sql(laptop, query)] == [m for m in mirrored if int(m[0]) <= restored]
    # The gap: the services' events stop before the kill and start again with the replacement, whose merges leap
    # past the floor (learners' own events come in between: each re-sends what no head acknowledged while it was away)
    cut = f"filter (where seq <= {restored}), min(epoch_ms(ts)) filter (where seq > {restored})"
    before, after = (int(ms) / 1000 for ms in sql(laptop, f"select max(epoch_ms(ts)) {cut} from events where learner is null")[0])
    versions = sql(laptop, "select min((payload->>'$.global_version')::int) from events "
                           f"where type = 'RoundMerged' and seq > {restored}")
    assert before <= killed_at and after >= new_start and int(versions[0][0]) > restore.LEAP, (before, after)
    print(f"the tape's gap: no service event from {before - killed_at:+.1f}s to {after - killed_at:+.1f}s "
          f"from the kill; merged versions go on at {versions[0][0]}")
