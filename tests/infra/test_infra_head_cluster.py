"""A head's stack on a three-node cluster (`stack.up(cluster=3, head_run=...)`, `yeto stack up --cluster 3 --head`):
clients over TLS on every node, routes over TLS with a route credential, every stream with three copies, and one
node's kill -9 loses no acknowledged event. The nodes run on this machine (docs/CLUSTER.md says what is not rehearsed)."""
from __future__ import annotations

import asyncio
import os
import signal

import pytest

from yeto.infra import stack
from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.nats import cluster as natscluster
from yeto.infra.stack.servers import head_routes
from yeto.schemas.subjects import EVT_STREAM, STREAMS

RUN = "r-headcluster"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _own_credentials(monkeypatch):
    """stack.up points this process at its stack's operator credential; undo that after the test."""
    monkeypatch.delenv("YETO_NATS_CREDS", raising=False)
    monkeypatch.delenv("YETO_NATS_CA", raising=False)


def test_a_head_clusters_nodes_serve_tls_on_every_interface_and_route_over_tls_with_a_credential(tmp_path):
    paths = stack.StackPaths(tmp_path)
    tls, (user, password) = head_routes(paths, ["127.0.0.1"])
    servers = natscluster.cluster_servers(tmp_path / "nats", 3, users_file=tmp_path / "auth" / "users.conf",
                                          logs=tmp_path / "logs", head=(tls, (user, password)))
    assert (tmp_path / "auth" / "routes.json").stat().st_mode & 0o777 == 0o600
    for server in servers.values():
        conf = server.config
        assert f'listen: "0.0.0.0:{server.port}"' in conf and f'listen: "0.0.0.0:{server.cluster.port}"' in conf
        cluster = conf[conf.index("cluster {"):]
        assert f'password: "{password}"' in cluster and "verify: true" in cluster and str(tls.cert_file) in cluster
        assert all(f'"nats-route://{user}:{password}@127.0.0.1:{s.cluster.port}"' in cluster for s in servers.values())
    assert natscluster.cluster_url(servers) == ",".join(f"tls://127.0.0.1:{s.port}" for s in servers.values())


async def _publish_and_count(url: str, start: int, count: int) -> tuple[list[int], list[int]]:
    bus = await NatsBus.connect(url, name="test")
    try:
        seqs = [await bus.publish_raw(f"yeto.evt.{RUN}.Probe", b"{}", msg_id=f"probe-{k}") for k in range(start, start + count)]
        # asked only with every node up: while a new leader is elected, stream requests may time out
        replicas = [(await bus.js.stream_info(spec.name)).config.num_replicas for spec in STREAMS] if start == 0 else []
        return seqs, replicas
    finally:
        await bus.close()


async def _kinds(url: str, lo: int, hi: int) -> dict[int, str]:
    """The event type (the subject's last token) at each sequence number of the event stream from lo to hi."""
    bus = await NatsBus.connect(url, name="test")
    try:
        return {seq: (await bus.js.get_msg(EVT_STREAM, seq)).subject.rsplit(".", 1)[1] for seq in range(lo, hi + 1)}
    finally:
        await bus.close()


def test_a_head_cluster_keeps_every_stream_on_three_nodes_and_outlives_a_node(tmp_path):
    try:
        rec = stack.up(tmp_path, head_run=RUN, cluster=3, hosts=["127.0.0.1", "localhost"])
        assert rec["ca_file"] and rec["url"].count("tls://127.0.0.1:") == 3
        assert os.environ["YETO_NATS_CA"] == rec["ca_file"]       # this process talks as the operator, over TLS
        first, replicas = asyncio.run(_publish_and_count(rec["url"], 0, 20))
        assert replicas == [3] * len(STREAMS)
        os.kill(rec["pids"]["nats-server-0"], signal.SIGKILL)
        second, _ = asyncio.run(_publish_and_count(rec["url"], 20, 20))
        again, _ = asyncio.run(_publish_and_count(rec["url"], 1, 39))      # every id stored once, none lost
        assert again == first[1:] + second and second[0] > first[-1]
        # No hole in the stream across the kill: every sequence number from the first probe to the last holds a
        # probe or, between them, an event of the stack's own (the services, once up, store a MessageRejected for
        # each `{}` they read; forked services are up before the probes, spawned ones may still be importing; the
        # watchdog a ComponentRestarted once it started the killed node again).
        kinds = asyncio.run(_kinds(rec["url"], first[0], second[-1]))
        assert {seq: kind for seq, kind in kinds.items() if kind != "ComponentRestarted"} == {
            seq: "Probe" if seq in first + second else "MessageRejected" for seq in range(first[0], second[-1] + 1)
            if kinds[seq] != "ComponentRestarted"}
    finally:
        stack.down(tmp_path)
