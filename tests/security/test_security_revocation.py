"""A learner credential ends with what it was issued for (issue 41): a replaced island generation's credential is
refused at once while the new generation's works, and once a run ends (finalized, stopped, failed) every credential
of the run is refused, its connections dropped, while another run's learners go on. Against a real nats-server with
the stack's users file, and through the real launcher on a real local stack (a kill, a replacement, `yeto down`)."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import nats
import pytest

from waiting import wait_for
from yeto.infra import procs
from yeto.infra.bus import auth as bus_auth
from yeto.infra.nats.server import NatsServer
from yeto.schemas.subjects import learner_event_subject

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))

RUN, OTHER = "r-rev", "r-other"


@pytest.fixture
def server(tmp_path):
    """A real nats-server under a state dir whose stack record names it (what the launcher reloads)."""
    state = tmp_path / "state"
    srv = NatsServer(state / "nats", users_file=bus_auth.prepare(state)).start()
    record = {"pids": {"nats-server": srv.pid}, "started_at": {"nats-server": procs.started_at(srv.pid)}}
    (state / "stack.json").write_text(json.dumps(record))
    try:
        yield srv, state
    finally:
        srv.stop()


def ident(state: Path, run_id: str, learner: str) -> dict:
    return json.loads(bus_auth.learner_file(state, run_id, learner).read_text())


async def attempt(url: str, who: dict, run_id: str, learner: str) -> str:
    """What the server says to `who` publishing its own progress subject and reading the run's globals: "refused"
    (the connection itself), the permission errors it met, or "" (all allowed)."""
    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))
    try:
        nc = await nats.connect(url, user=who["user"], password=who["password"], inbox_prefix=who["inbox_prefix"],
                                error_cb=on_error, allow_reconnect=False, connect_timeout=5)
    except Exception as e:  # noqa: BLE001 - what the refusal is, is asserted below
        return "refused" if "authorization" in f"{e} {errors}".lower() else f"not reached: {e!r}"
    try:
        await nc.publish(learner_event_subject(run_id, "LearnerProgress", learner), b"{}")
        await nc.flush()
    finally:
        await nc.close()
    return "; ".join(errors)


def says(url: str, who: dict, run_id: str, learner: str, answer: str) -> bool:
    """Whether the server comes to `answer` `who` (a reload the test just caused lands within moments: asked until then;
    a connection reset while it reloads is not an answer)."""
    got: list[str] = []

    def check() -> bool:
        got[:] = [asyncio.run(attempt(url, who, run_id, learner))]
        return got[0] == answer
    wait_for(check, 20, f"the server to answer {who['user']} with {answer!r}", interval=0.2, detail=lambda: repr(got))
    return True


def refused(url: str, who: dict, run_id: str, learner: str) -> bool:
    return says(url, who, run_id, learner, "refused")


def works(url: str, who: dict, run_id: str, learner: str) -> bool:
    return says(url, who, run_id, learner, "")


@pytest.mark.timeout(60)
def test_a_new_generation_gets_a_new_password_and_the_replaced_one_is_refused_at_once(server):
    srv, state = server
    path = bus_auth.issue_learner(state, RUN, "island-1", 0)
    first = ident(state, RUN, "island-1")
    assert path == bus_auth.learner_file(state, RUN, "island-1") and first["generation"] == 0
    assert works(srv.url, first, RUN, "island-1")
    assert bus_auth.issue_learner(state, RUN, "island-1", 0) == path and ident(state, RUN, "island-1") == first, \
        "a redelivered start of the same generation keeps its credential"

    async def live_connection_dropped() -> bool:
        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()
        nc = await nats.connect(srv.url, user=first["user"], password=first["password"],
                                inbox_prefix=first["inbox_prefix"], allow_reconnect=False, closed_cb=on_closed)
        bus_auth.issue_learner(state, RUN, "island-1", 1)          # the launcher starts the replacement
        await asyncio.wait_for(closed.wait(), 10)
        return nc.is_closed
    assert asyncio.run(live_connection_dropped()), "the old generation's open connection is dropped by the reload"
    second = ident(state, RUN, "island-1")
    assert second["generation"] == 1 and second["password"] != first["password"]
    assert refused(srv.url, first, RUN, "island-1")
    assert works(srv.url, second, RUN, "island-1")
    assert bus_auth.issue_learner(state, RUN, "island-1", 0) == path and ident(state, RUN, "island-1") == second, \
        "an older generation's late start never brings its password back"


@pytest.mark.timeout(60)
def test_revoking_an_ended_run_refuses_all_its_credentials_and_leaves_other_runs_working(server):
    srv, state = server
    for run_id, learner in ((RUN, "island-0"), (RUN, "island-1"), (OTHER, "island-0")):
        bus_auth.issue_learner(state, run_id, learner, 0)
    ended = {who: ident(state, RUN, who) for who in ("island-0", "island-1")}
    assert all(works(srv.url, i, RUN, who) for who, i in ended.items())
    assert bus_auth.revoke_run(state, RUN) == 2
    assert bus_auth.revoke_run(state, RUN) == 0, "revoking twice reloads nothing"
    for who, i in ended.items():
        assert refused(srv.url, i, RUN, who), who
        assert ident(state, RUN, who)["revoked"] is True
        assert i["user"] not in bus_auth.users_file(state).read_text()
    assert works(srv.url, ident(state, OTHER, "island-0"), OTHER, "island-0")
    assert bus_auth.issue_learner(state, RUN, "island-1", 5) is not None and refused(
        srv.url, ident(state, RUN, "island-1"), RUN, "island-1"), "a start after the run ended issues nothing new"
    bus_auth.prepare(state)                  # `stack up` renders the users file again: the revocation holds
    assert ended["island-0"]["user"] not in bus_auth.users_file(state).read_text()


def watch_consumers(url: str, state: Path) -> list[str]:
    """The consumers of RUN's learners' watches still on the server (as the operator sees them)."""
    async def names() -> list[str]:
        op = json.loads(bus_auth.operator_file(state).read_text())
        nc = await nats.connect(url, user=op["user"], password=op["password"])
        try:
            return [c.name for s in ("YETO_GKEY", "YETO_GDELTA", "YETO_EVT")
                    for c in await nc.jetstream().consumers_info(s) if c.name.startswith(f"w-{RUN}-")]
        finally:
            await nc.close()
    return asyncio.run(names())


@pytest.fixture(scope="module")
def material(tmp_path_factory) -> dict:
    import learner_tiny

    return learner_tiny.material(tmp_path_factory.mktemp("material"))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_launcher_revokes_a_replaced_generation_and_an_ended_run_and_the_run_still_finalizes(tmp_path, material):
    from e2e_stack import Stack

    s = Stack(tmp_path / "home", material["model"], material["data"])
    s.launch(RUN, "--max-steps", "100000")                  # it ends when the test says `yeto down`
    try:
        s.wait_for(RUN, "island 1 training", lambda evs: any(e["learner"] == "island-1" for e in evs), "LearnerProgress")
        url, gen0 = json.loads((s.home / "stack.json").read_text())["url"], ident(s.home, RUN, "island-1")
        killed = s.yeto("chaos", "kill", RUN, "1")
        assert killed.returncode == 0 and "killed island 1 generation 0" in killed.stdout, killed.stdout + killed.stderr
        replaced = s.wait_for(RUN, "island 1 replaced", lambda evs: bool(evs), "IslandReplaced", timeout=120)[0]
        gen1 = ident(s.home, RUN, "island-1")
        assert gen1["generation"] == 1 and gen1["password"] != gen0["password"]
        assert refused(url, gen0, RUN, "island-1"), "the replaced generation's credential still connects"
        s.wait_for(RUN, "a round merged with island 1's new generation", lambda evs: any(
            e["type"] == "RoundMerged" and "island-1" in e["responders"] for e in evs) and any(
            e["type"] == "LearnerProgress" and e["learner"] == "island-1" and e["generation"] == 1 for e in evs),
            "LearnerProgress", "RoundMerged", after_seq=replaced["seq"], timeout=180)
        assert len(watch_consumers(url, s.home)) == 6, "each learner's three watches, made by the launcher"
        down = s.yeto("down", RUN)
        assert down.returncode == 0, down.stdout + down.stderr
        s.finish(RUN, timeout=240)
        acked = {e["learner"] for e in s.events(RUN, "LearnerFinalAck")}   # final versions held: their watches worked
        assert acked == {"island-0", "island-1"}, s.story(RUN)
        last = {who: ident(s.home, RUN, who) for who in ("island-0", "island-1")}
        wait_for(lambda: all(ident(s.home, RUN, who).get("revoked") for who in last), 30,
                 "the launcher to revoke the finalized run's credentials")
        for who, i in last.items():
            assert refused(url, i, RUN, who), f"{who}'s credential still works after RunFinalized"
        wait_for(lambda: not watch_consumers(url, s.home), 30, "the ended run's watch consumers deleted",
                 detail=lambda: repr(watch_consumers(url, s.home)))
    finally:
        s.down()


LEAVER = r"""
import sys, threading
from yeto.learners import bus_client

connected, real = threading.Event(), bus_client.connect_bus


async def connect_and_say(*args, **kwargs):     # the transport's own connection, then told: its refusals watched from here
    bus = await real(*args, **kwargs)
    connected.set()
    return bus
bus_client.connect_bus = connect_and_say

url, run_id, learner, ended = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "ended"
transport = bus_client.connect(nats_url=url, run_id=run_id, learner=learner, generation=0)
if not connected.wait(60):
    sys.exit("never connected")
if ended:
    transport.end_training()        # the last pushes queued; the final evaluation would follow
print("connected", flush=True)
sys.stdin.readline()                # still finishing: the test holds stdin open until the revocation ends this process
print("never revoked", flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ended", ["ended", "training"])
def test_a_learner_whose_training_is_done_leaves_with_status_0_when_the_runs_end_revokes_it(server, ended, tmp_path):
    """A joined island's learner still in its final evaluation when the run finalized met the revocation and `yeto
    join` returned 3 (CI at 00d4db8); once its training is done, the refusal is the run's end and the exit is 0. A
    learner still training when its credential is revoked exits 3 as before (a retry could never work)."""
    import os
    import subprocess

    srv, state = server
    path = bus_auth.issue_learner(state, RUN, "island-1", 0)
    env = {**os.environ, "YETO_NATS_CREDS": str(path)}
    proc = subprocess.Popen([sys.executable, "-c", LEAVER, srv.url, RUN, "island-1", ended], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        before: list[str] = []        # the bus's own lines until then (no launcher here makes its watches)
        while (line := proc.stdout.readline()) not in ("connected\n", ""):
            before.append(line)
        assert line == "connected\n", "".join(before)
        assert bus_auth.revoke_run(state, RUN) == 1
        out = proc.stdout.read()
        code = proc.wait(60)
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    if ended == "ended":
        assert code == 0, out
        assert "learner stopped: the run ended while this learner was finishing (its training done)" in out, out
        assert "left unsent: 0 push(es), 0 event(s)" in out, out
    else:
        assert code == 3, out
        assert "refused this learner's credential when it reconnected" in out, out
    assert "never revoked" not in out and json.loads(path.read_text())["password"] not in out
