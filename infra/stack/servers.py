"""The nats-server(s) of a stack: one on loopback, a head's on all interfaces with TLS, or a cluster's nodes."""
from __future__ import annotations

from typing import TYPE_CHECKING

from yeto.infra import procs
from yeto.infra.bus import auth as bus_auth
from yeto.infra.nats import cluster as natscluster
from yeto.infra.nats.server import NatsServer, TlsConfig
from yeto.infra.stack.components import alive_in
from yeto.schemas.base import check_run_id

if TYPE_CHECKING:
    from yeto.infra.stack import StackPaths


def head_server(paths: StackPaths, *, port: int, run_id: str, hosts: list[str]) -> NatsServer:
    """A head VM's nats-server: all interfaces, TLS with a self-signed certificate, only the stack's users (the
    launcher issues each island's learner credential as it starts the island)."""
    from yeto.infra.nats.server import TlsConfig
    from yeto.infra.nats.tls import self_signed

    check_run_id(run_id)   # it names the run's bus user and subjects in the users file: never a free-form string
    cert, key = self_signed(paths.root / "tls", hosts)
    return NatsServer(paths.nats, host="0.0.0.0", port=port or 4222, tls=TlsConfig(cert_file=cert, key_file=key),
                      users_file=bus_auth.prepare(paths.root), log_file=paths.logs / "nats-server.log")


def head_routes(paths: StackPaths, hosts: list[str] | None) -> tuple[TlsConfig, tuple[str, str]]:
    """A head cluster's TLS (the head's certificate) and route credential (made once, 0600 under auth/)."""
    import json
    import secrets

    from yeto.infra.nats.tls import self_signed

    cert, key = self_signed(paths.root / "tls", hosts or ["127.0.0.1", "localhost"])
    path = bus_auth.auth_dir(paths.root) / "routes.json"
    if not path.exists():
        bus_auth.write_secret(path, json.dumps({"user": "route", "password": secrets.token_urlsafe(32)}))
    route = json.loads(path.read_text())
    return TlsConfig(cert_file=cert, key_file=key), (route["user"], route["password"])


def servers_for(paths: StackPaths, size: int, *, port: int, head_run: str | None, hosts: list[str] | None,
                nodes: dict | None) -> dict[str, NatsServer]:
    """The servers a start makes, by record name: a head's, a cluster's `size` nodes (at their recorded `nodes`
    ports), or the one local server."""
    if head_run and size == 1:
        return {natscluster.SINGLE: head_server(paths, port=port, run_id=head_run,
                                                hosts=hosts or ["127.0.0.1", "localhost"])}
    if size > 1:
        if head_run:
            check_run_id(head_run)
        if port and not nodes:      # --port: the first node's client port (4222 for a head)
            nodes = {natscluster.node_name(0): {"port": port, "route_port": natscluster.free_port()}}
        return natscluster.cluster_servers(paths.nats, size, users_file=bus_auth.prepare(paths.root), logs=paths.logs,
                                           nodes=nodes, head=head_routes(paths, hosts) if head_run else None)
    return {natscluster.SINGLE: NatsServer(paths.nats, port=port, users_file=bus_auth.prepare(paths.root),
                                           log_file=paths.logs / "nats-server.log")}


def head_nodes(paths: StackPaths, node: int, peers: list[str], *, port: int, hosts: list[str] | None) -> dict[str, NatsServer]:
    """Node `node` of a head whose nodes run on machines of their own at `peers` (infra/nats/cluster.py head_node);
    every node has the bundle's certificate and route credential, made on the laptop (infra/head/records.py)."""
    from yeto.infra.nats.tls import node_certificate

    head_cert, route = head_routes(paths, hosts)
    cert, key = node_certificate(paths.root / "tls", [*(hosts or ["127.0.0.1", "localhost"]), "yeto-head", peers[node]])
    return natscluster.head_node(paths.nats, node, peers, port=port or 4222, users_file=bus_auth.prepare(paths.root),
                                 logs=paths.logs, auth=route,
                                 tls=TlsConfig(cert_file=cert, key_file=key, ca_file=head_cert.cert_file))


def restart_nodes(paths: StackPaths, rec: dict) -> None:
    """A cluster node that died comes back at its recorded ports with its store, and rejoins (the others serve)."""
    if rec.get("cluster", 1) == 1:
        return
    if rec.get("peers"):
        servers = head_nodes(paths, rec["node"], rec["peers"], port=rec["port"], hosts=None)
    else:
        servers = natscluster.cluster_servers(paths.nats, rec["cluster"], users_file=bus_auth.users_file(paths.root),
                                              logs=paths.logs, nodes=rec["nodes"],
                                              head=head_routes(paths, None) if rec.get("ca_file") else None)
    for name, server in servers.items():
        if not alive_in(rec, name):
            server.start(detach=True)
            rec["pids"][name], rec["started_at"][name] = server.pid, procs.started_at(server.pid)


def local_url(server: NatsServer) -> str:
    """How processes on this machine reach the server (a head binds 0.0.0.0; locally it is 127.0.0.1)."""
    return server.url.replace("@0.0.0.0:", "@127.0.0.1:").replace("//0.0.0.0:", "//127.0.0.1:")
