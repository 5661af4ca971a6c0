"""The stack on a three-node NATS cluster (`stack.up(cluster=3)`): the generated configuration, and a real run that
outlives a kill -9 of the node leading the event stream and of one instance of each service, nothing lost on the tape."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from yeto.infra import stack
from yeto.infra.nats import cluster as natscluster
from yeto.infra.nats.server import TlsConfig, render_config
from yeto.infra.stack import zygote as stack_zygote
from yeto.infra.stack.components import component_commands

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))

RUN = "clustered"
NODES = {f"nats-server-{k}" for k in range(3)}


@pytest.fixture(autouse=True)
def _own_credentials(monkeypatch):
    """stack.up points this process at its stack's operator credential; undo that after the test."""
    monkeypatch.delenv("YETO_NATS_CREDS", raising=False)
    monkeypatch.delenv("YETO_NATS_CA", raising=False)


def test_cluster_nodes_route_to_each_other_on_loopback_with_their_own_store_and_name(tmp_path):
    servers = natscluster.cluster_servers(tmp_path / "nats", 3, users_file=tmp_path / "auth" / "users.conf",
                                          logs=tmp_path / "logs")
    assert list(servers) == sorted(NODES)
    routes = sorted(s.cluster.port for s in servers.values())
    for k, server in enumerate(servers.values()):
        conf = server.config
        assert f'server_name: "yeto-{k}"' in conf and 'name: "yeto"' in conf
        assert f'listen: "127.0.0.1:{server.cluster.port}"' in conf and f'listen: "127.0.0.1:{server.port}"' in conf
        assert all(f'"nats-route://127.0.0.1:{p}"' in conf for p in routes)
        assert f'store_dir: "{tmp_path}/nats/node-{k}/jetstream"' in conf
        assert 'include "../../auth/users.conf"' in conf      # every node admits only the stack's users
    assert natscluster.cluster_url(servers) == ",".join(f"nats://127.0.0.1:{s.port}" for s in servers.values())
    again = natscluster.cluster_servers(tmp_path / "nats", 3, users_file=tmp_path / "auth" / "users.conf",
                                        logs=tmp_path / "logs", nodes=natscluster.node_ports(servers))
    assert {n: s.config for n, s in again.items()} == {n: s.config for n, s in servers.items()}  # a restart: same place


def test_streams_get_one_copy_per_node_up_to_five_and_a_two_node_cluster_or_bare_routes_are_refused(tmp_path):
    from yeto.infra.nats.server import stream_config
    from yeto.schemas.subjects import STREAMS

    assert [natscluster.replicas(n) for n in (1, 3, 5, 7)] == [1, 3, 5, 5]
    assert stream_config(STREAMS[0], 3).num_replicas == 3 and stream_config(STREAMS[0]).num_replicas == 1
    for size in (0, 2):
        with pytest.raises(ValueError, match="3 or more nodes"):
            stack.up(tmp_path / "home", cluster=size)
    with pytest.raises(AssertionError, match="need TLS and a credential"):     # routes off loopback, unprotected
        render_config(host="0.0.0.0", port=1, store_dir=tmp_path, max_payload=1, users_file=tmp_path,
                      tls=TlsConfig(cert_file=tmp_path / "c", key_file=tmp_path / "k"),
                      cluster=natscluster.cluster_servers(tmp_path, 3, users_file=tmp_path, logs=tmp_path)
                      ["nats-server-0"].cluster)


def test_a_cluster_runs_two_of_each_service_that_can_run_twice_and_one_syncer_per_shard(tmp_path):
    names = set(component_commands("nats://a,nats://b", tmp_path, tmp_path / "tape.duckdb", syncers=2, instances=2))
    assert names == {"tape", "planner-0", "planner-1", "launcher-0", "launcher-1", "syncer-0", "syncer-1",
                     "finalizer-0", "finalizer-1"}
    cmds = component_commands("nats://a,nats://b", tmp_path, tmp_path / "tape.duckdb", instances=2)
    assert cmds["launcher-1"][-2:] == ["--instance", "launcher-1"] and "syncer" in cmds
    assert all("nats://a,nats://b" in cmd for cmd in cmds.values())


@pytest.fixture(scope="module")
def material(tmp_path_factory) -> dict:
    import learner_tiny

    root = tmp_path_factory.mktemp("material")
    return {"model": learner_tiny.write_model_dir(root / "model"),
            "data": learner_tiny.write_chat_jsonl(root / "chat.jsonl", 300)}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_on_a_three_node_cluster_outlives_a_node_and_an_instance_of_each_service_with_nothing_lost(
        tmp_path, material, caplog):
    from cluster_run import ClusterRun

    # Every connection of this process retries the killed node from its server list and logs each refusal: kept
    # out of a failure's report, which must show the run's story.
    caplog.set_level(logging.ERROR, logger="yeto.infra.bus.nats_bus")

    c = ClusterRun(tmp_path / "home", material)
    try:
        c.start_and_kill_faults(RUN)
        c.finalize_and_check(RUN)
    finally:
        c.down()


def test_a_stack_record_names_its_nodes_whatever_their_number():
    rec = {"pids": {"nats-server-0": 1, "nats-server-1": 2, "tape": 3, "launcher-0": 4}}
    assert natscluster.node_names(rec) == ["nats-server-0", "nats-server-1"]
    assert natscluster.node_names({"pids": {"nats-server": 1, "syncer": 2}}) == ["nats-server"]


def test_a_state_dir_keeps_the_shape_its_streams_were_made_in(tmp_path):
    nats = tmp_path / "nats"
    assert natscluster.check_store(nats, None) == 1 and natscluster.check_store(nats, 3) == 3   # nothing kept yet
    (nats / "jetstream").mkdir(parents=True)
    assert natscluster.check_store(nats, None) == 1
    with pytest.raises(ValueError, match="keeps the streams of a 1-server stack"):
        natscluster.check_store(nats, 3)
    other = tmp_path / "other"
    for k in range(3):
        (other / f"node-{k}").mkdir(parents=True)
    assert natscluster.check_store(other, None) == 3         # `yeto stack up` after `down` comes back as a cluster
    with pytest.raises(ValueError, match="--cluster 3"):
        natscluster.check_store(other, 1)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_dead_node_rejoins_at_its_address_and_catches_up_and_down_then_up_brings_the_cluster_back(tmp_path):
    from cluster_run import replicas_current, stream_messages
    from waiting import wait_for

    home = tmp_path / "home"
    first = stack.up(home, cluster=3, watch=False)     # `stack.up` brings the node back here, not the watchdog
    try:
        # a ServiceStarted from each but the nodes, the tape and the stack's pre-imported learner (infra/stack/zygote.py)
        started = len([n for n in first["pids"] if not n.startswith("nats-server-") and n not in ("tape", stack_zygote.NAME)])
        wait_for(lambda: asyncio.run(replicas_current(first["url"])) and
                 (asyncio.run(stream_messages(first["url"])) or 0) >= started, 60, "a settled cluster, services started")
        node = "nats-server-1"
        os.kill(first["pids"][node], signal.SIGKILL)
        wait_for(lambda: not stack.status(home)[node], 10, f"{node} gone after SIGKILL")
        before = wait_for(lambda: asyncio.run(stream_messages(first["url"])), 60, "YETO_EVT answering on two nodes")
        again = stack.up(home)                                   # restarts the node alone, at its address
        assert again["url"] == first["url"] and again["pids"][node] != first["pids"][node]
        assert {n: p for n, p in again["pids"].items() if n != node} == \
               {n: p for n, p in first["pids"].items() if n != node}
        wait_for(lambda: asyncio.run(replicas_current(first["url"])), 60, "every replica of every stream current")
        stack.down(home)
        back = stack.up(home)                                    # no flag: the store says three nodes
        assert set(natscluster.node_names(back)) == NODES and back["cluster"] == 3
        after = wait_for(lambda: asyncio.run(stream_messages(back["url"])), 60, "YETO_EVT answering after the restart")
        assert after >= before > 0                               # the streams came back with their events
    finally:
        stack.down(home)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_services_publishing_one_derived_id_at_once_on_a_cluster_store_it_once_and_both_go_on(tmp_path, monkeypatch):
    """Without a retry a cluster refuses one of them ("duplicate message id is in process": the first is still a Raft
    proposal), which ended the service that published second."""
    from yeto.infra.bus import auth as bus_auth
    from yeto.infra.bus.nats_bus import NatsBus

    (tmp_path / "logs").mkdir()
    users = bus_auth.prepare(tmp_path)
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(tmp_path)))
    servers = natscluster.cluster_servers(tmp_path / "nats", 3, users_file=users, logs=tmp_path / "logs")

    async def race() -> None:
        await natscluster.ready(natscluster.cluster_url(servers), 3)
        a, b = await NatsBus.connect(servers["nats-server-0"].url), await NatsBus.connect(servers["nats-server-2"].url)
        for i in range(100):
            first, second = await asyncio.gather(*(bus.publish_raw("yeto.evt.r1.X", b"{}", msg_id=f"m{i}", retry_for=10)
                                                   for bus in (a, b)))
            assert first == second, f"message {i}: stored at {first} and {second}"
        assert (await a.js.stream_info("YETO_EVT")).state.messages == 100
        await a.close()
        await b.close()
    try:
        for server in servers.values():
            server.start()
        asyncio.run(race())
    finally:
        for server in servers.values():
            server.stop()
