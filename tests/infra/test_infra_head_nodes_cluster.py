"""A head over several VMs, the parts that need no network namespace: one node's configuration (routes to the
other VMs' addresses over TLS with the route credential, a certificate naming its address signed by the head's),
which components each node runs, and the learner credentials every node derives alike. The nodes together, in one
network namespace each, are rehearsed by tests/cloud/test_cloud_head_cluster.py (slow)."""
from __future__ import annotations

import json
import subprocess

import pytest

from yeto.infra.bus import auth
from yeto.infra.head import credentials
from yeto.infra.nats import cluster as natscluster
from yeto.infra.nats.tls import node_certificate, self_signed
from yeto.infra.stack import StackPaths, up
from yeto.infra.stack.components import SCALABLE, component_commands, placed
from yeto.infra.stack.servers import head_nodes
from yeto.schemas.final import RunStopped
from yeto.schemas.fleet import IslandRequested
from yeto.schemas.head_size import check_head_nodes, head_nodes_line

PEERS = ["10.9.0.2", "10.9.0.3", "10.9.0.4"]
RUN = "r-nodes"


def test_a_head_node_routes_to_every_vm_over_tls_with_the_credential_and_a_certificate_naming_its_address(tmp_path):
    paths = StackPaths(tmp_path)
    servers = head_nodes(paths, 1, PEERS, port=4222, hosts=None)
    (name, server), = servers.items()
    route = json.loads((tmp_path / "auth" / "routes.json").read_text())
    conf = server.config
    assert name == "nats-server-1" and 'listen: "0.0.0.0:4222"' in conf and f'listen: "0.0.0.0:{natscluster.ROUTE_PORT}"' in conf
    cluster = conf[conf.index("cluster {"):]
    assert all(f'"nats-route://route:{route["password"]}@{ip}:{natscluster.ROUTE_PORT}"' in cluster for ip in PEERS)
    assert 'server_name: "yeto-1"' in conf and f'ca_file: "{tmp_path}/tls/server.pem"' in cluster
    assert "verify: true" not in conf[:conf.index("cluster {")]      # learners are not asked for a certificate
    check = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "tls" / "server.pem"), "-verify_ip", PEERS[1],
                            str(tmp_path / "tls" / "node.pem")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr       # a route dialing 10.9.0.3 accepts it
    wrong = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "tls" / "server.pem"), "-verify_ip", PEERS[0],
                            str(tmp_path / "tls" / "node.pem")], capture_output=True, text=True)
    assert wrong.returncode != 0                                   # and it names this node's address only
    assert natscluster.peers_url(PEERS, 4222) == ",".join(f"tls://{ip}:4222" for ip in PEERS)


def test_a_node_certificate_not_signed_by_the_heads_is_refused_by_a_learner_pinning_the_head(tmp_path):
    self_signed(tmp_path / "head", ["yeto-head"])
    self_signed(tmp_path / "other", ["yeto-head"])
    node_certificate(tmp_path / "other", ["10.9.0.2"])
    check = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "head" / "server.pem"),
                            str(tmp_path / "other" / "node.pem")], capture_output=True, text=True)
    assert check.returncode != 0


def test_each_node_runs_its_share_the_tape_and_syncer_once_each_service_twin_on_another_node(tmp_path):
    cmds = component_commands("tls://x:4222", tmp_path, tmp_path / "tape.duckdb", syncers=2, instances=2)
    shares = [set(placed(cmds, k, 3)) for k in range(3)]
    assert shares == [{"tape", "planner-0", "finalizer-1"}, {"syncer-0", "planner-1", "launcher-0"},
                      {"syncer-1", "launcher-1", "finalizer-0"}]
    assert set().union(*shares) == set(cmds) and sum(map(len, shares)) == len(cmds)     # each exactly once
    for service in SCALABLE:
        assert len({k for k, share in enumerate(shares) if any(n.startswith(service) for n in share)}) == 2
    one = component_commands("tls://x:4222", tmp_path, tmp_path / "tape.duckdb", syncers=1, instances=2)
    assert "syncer" in placed(one, 1, 3) and "tape-1" in placed({**one, "tape-1": one["tape"]}, 1, 3)


def test_every_node_derives_the_same_learner_password_and_revokes_it_when_the_run_ends(tmp_path):
    a, b = tmp_path / "node-a", tmp_path / "node-b"
    for node in (a, b):
        auth.prepare(node)
        auth.write_secret(auth.learner_key_file(node), "shared-key")
    issued = json.loads(auth.issue_learner(a, RUN, "island-1", 2).read_text())     # the launcher, on node a
    event = IslandRequested(id="e1", run_id=RUN, source="launcher", island=1, generation=2, spec={})
    assert credentials.admit(b, RUN, event.model_dump_json().encode()) == "admits island-1 generation 2"
    followed = json.loads(auth.learner_file(b, RUN, "island-1").read_text())
    assert followed["password"] == issued["password"] and followed["user"] == issued["user"]
    assert issued["password"] in auth.users_file(b).read_text()
    older = IslandRequested(id="e0", run_id=RUN, source="launcher", island=1, generation=1, spec={})
    credentials.admit(b, RUN, older.model_dump_json().encode())           # replayed out of order: the newer stays
    assert json.loads(auth.learner_file(b, RUN, "island-1").read_text())["password"] == issued["password"]
    other = IslandRequested(id="e2", run_id="r-other", source="launcher", island=0, generation=0, spec={})
    assert credentials.admit(b, RUN, other.model_dump_json().encode()).startswith("ignored")
    ended = RunStopped(id="e3", run_id=RUN, source="finalizer", reason="yeto down --now")
    assert credentials.admit(b, RUN, ended.model_dump_json().encode()).endswith("1 credential(s) revoked")
    assert issued["password"] not in auth.users_file(b).read_text()
    c = tmp_path / "node-c"                                          # another key: another password
    auth.prepare(c)
    auth.write_secret(auth.learner_key_file(c), "another-key")
    assert json.loads(auth.issue_learner(c, RUN, "island-1", 2).read_text())["password"] != issued["password"]


@pytest.mark.parametrize(("nodes", "refused"), [(1, None), (3, None), (5, None), (2, "Raft majority"), (6, "at most 5"),
                                                (0, "use 1, or 3 to 5")])
def test_head_nodes_takes_1_or_3_to_5_and_says_why_not_2_or_more_than_5(nodes, refused):
    if refused is None:
        check_head_nodes(nodes)
        assert head_nodes_line(nodes, 0.19).startswith(f"head: {nodes} VM")
    else:
        with pytest.raises(ValueError, match=refused):
            check_head_nodes(nodes)


def test_head_nodes_line_says_what_three_buy_and_what_the_other_two_cost():
    assert "$0.57/hr (+$0.38/hr for the other 2)" in head_nodes_line(3, 0.19)
    assert "mirror" in head_nodes_line(1, 0.19) and "--head-nodes 3" in head_nodes_line(1, 0.19)


@pytest.mark.parametrize("kwargs", [dict(node=0), dict(node=3, head_run=RUN), dict(node=0, cluster=5, head_run=RUN)])
def test_a_node_of_several_vms_needs_head_node_and_a_matching_size(tmp_path, kwargs):
    with pytest.raises(ValueError, match="--peers names 3 nodes"):
        up(tmp_path, peers=PEERS, **kwargs)
    with pytest.raises(ValueError, match="Raft"):
        up(tmp_path, peers=PEERS[:2], node=0, head_run=RUN)
