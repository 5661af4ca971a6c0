"""A JetStream cluster on this machine: N nats-server nodes routed to each other on 127.0.0.1, streams replicated.

`yeto stack up --cluster 3` runs the stack against one (docs/CLUSTER.md). Each node has its own store dir
(<state>/nats/node-K), its own client and route ports (kept in stack.json, so a node restarted after a crash
comes back at the same address and rejoins with its data), and a server name JetStream's Raft groups know
it by. Clients get every node's URL (comma-separated; infra/bus/nats_bus.py hands nats-py the list) and move to
another node when theirs dies. A head's cluster (`stack up --cluster 3 --head`) serves clients on all interfaces over
TLS and routes its nodes over TLS with a route credential, the configuration a cluster across VMs needs; with
`--node K --peers A,B,C` (`yeto launch --head-nodes 3`: one SkyPilot node each) this machine runs node K alone,
routed to the others' addresses (`head_node`; docs/CLUSTER.md).
"""
from __future__ import annotations

import asyncio
from pathlib import Path

from yeto.infra.nats.server import ClusterConfig, NatsServer, TlsConfig, ensure_streams, free_port

SINGLE = "nats-server"
MAX_REPLICAS = 5          # JetStream's limit on a stream's copies
ROUTE_PORT = 6222         # NATS's usual route port: a head node's on its own VM (the nodes reach it on their network)
PROBE_FIRST_S, PROBE_LAST_S = 0.5, 5.0     # `ready`'s JetStream probe: its first request's timeout, doubled up to this


def node_name(k: int) -> str:
    return f"{SINGLE}-{k}"


def node_names(rec: dict) -> list[str]:
    """The nats-server processes a stack record names: `nats-server` alone, or `nats-server-K` of a cluster."""
    return [n for n in rec.get("pids", {}) if n == SINGLE or n.startswith(f"{SINGLE}-")]


def replicas(size: int) -> int:
    """Copies of each stream on a cluster of `size` nodes: all of them, up to JetStream's limit."""
    return min(size, MAX_REPLICAS)


def check_size(size: int) -> None:
    if size == 2 or size < 1:
        raise ValueError(f"--cluster {size}: a JetStream cluster needs 3 or more nodes to outlive the loss of one "
                         f"(its Raft groups need a majority); use 1 for a single server, or 3")


def check_store(nats_dir: Path, size: int | None) -> int:
    """The number of nodes to start: `size`, or (None) as many as keep the streams under nats_dir. Another number
    than those is refused: its streams would start empty beside a tape that holds the old ones' sequence numbers."""
    kept = len(list(nats_dir.glob("node-*"))) or (1 if (nats_dir / "jetstream").exists() else 0)
    if size is not None and kept and size != kept:
        raise ValueError(f"{nats_dir} keeps the streams of a {kept}-server stack: start it as one (`--cluster {kept}`), "
                         f"or use another --state-dir for a {size}-server stack")
    return size or kept or 1


def cluster_servers(nats_dir: Path, size: int, *, users_file: Path, logs: Path, nodes: dict | None = None,
                    head: tuple[TlsConfig, tuple[str, str]] | None = None) -> dict[str, NatsServer]:
    """The `size` nodes, not started. `nodes`: the ports recorded by an earlier start ({name: {port, route_port}}),
    reused so that clients and the other nodes' routes find a restarted node where it was. `head` (TLS, route
    credential): a head's nodes, serving clients on all interfaces over TLS, routed over TLS with the credential."""
    nodes = nodes or {}
    ports = {node_name(k): nodes.get(node_name(k)) or {"port": free_port(), "route_port": free_port()} for k in range(size)}
    routes = tuple(p["route_port"] for p in ports.values())
    tls, auth = head if head else (None, None)
    return {name: NatsServer(nats_dir / f"node-{k}", host="0.0.0.0" if head else "127.0.0.1", port=p["port"], tls=tls,
                             users_file=users_file, log_file=logs / f"{name}.log",
                             cluster=ClusterConfig(server_name=f"yeto-{k}", port=p["route_port"], routes=routes,
                                                   tls=tls, auth=auth))
            for k, (name, p) in enumerate(ports.items())}


def head_node(nats_dir: Path, k: int, peers: list[str], *, port: int, users_file: Path, logs: Path, tls: TlsConfig,
              auth: tuple[str, str]) -> dict[str, NatsServer]:
    """Node `k` of a head whose nodes run on machines of their own (`yeto launch --head-nodes 3`), not started: clients
    on every interface over TLS at `port`, routes over TLS with the route credential `auth` at ROUTE_PORT to every
    node's address (`peers`, in node order, this one's included). `tls`: the node's own certificate (its address in
    it: a route checks the name it dials) and, as `ca_file`, the head's, which every node's is signed by."""
    routes = tuple(f"{ip}:{ROUTE_PORT}" for ip in peers)
    client = TlsConfig(cert_file=tls.cert_file, key_file=tls.key_file)     # learners are not asked for a certificate
    return {node_name(k): NatsServer(nats_dir / f"node-{k}", host="0.0.0.0", port=port, tls=client, users_file=users_file,
                                     log_file=logs / f"{node_name(k)}.log",
                                     cluster=ClusterConfig(server_name=f"yeto-{k}", port=ROUTE_PORT, routes=routes,
                                                           tls=tls, auth=auth))}


def peers_url(peers: list[str], port: int) -> str:
    """Every node's client URL, comma-separated, for a head's nodes on machines of their own."""
    return ",".join(f"tls://{ip}:{port}" for ip in peers)


def node_ports(servers: dict[str, NatsServer]) -> dict[str, dict[str, int]]:
    """What stack.json keeps of each node."""
    return {name: {"port": s.port, "route_port": s.cluster.port} for name, s in servers.items() if s.cluster}


def cluster_url(servers: dict[str, NatsServer]) -> str:
    """Every node's client URL on this machine, comma-separated (what --nats-url and $YETO_NATS_URL take)."""
    return ",".join(s.url.replace("//0.0.0.0:", "//127.0.0.1:") for s in servers.values())


async def ready(url: str, num_replicas: int, timeout_s: float = 60.0) -> None:
    """Wait until the cluster has a JetStream meta leader (until then every stream request is refused as
    unavailable), then create or update the streams with `num_replicas` copies.

    A JetStream request sent before the meta leader is elected is never answered (not refused): the probe is asked
    with a short timeout, doubled on each miss up to the client's 5 s, so the streams are made within about half a
    second of the election (0.6 s after a fresh cluster's start here) instead of after a whole 5 s request timeout."""
    from nats.js.errors import ServiceUnavailableError

    from yeto.infra.bus.nats_bus import RETRYABLE, NatsBus

    bus = await NatsBus.connect(url, name="stack-up")
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        probe_s = PROBE_FIRST_S
        while True:
            try:
                await bus.nc.jsm(timeout=probe_s).account_info()
                await ensure_streams(bus, replicas=num_replicas)
                return
            except (*RETRYABLE, ServiceUnavailableError) as e:
                if loop.time() > deadline:
                    raise RuntimeError(f"the NATS cluster at {url} has no JetStream leader after {timeout_s:.0f}s "
                                       f"({e!r}); see the nats-server-K logs") from e
                probe_s = min(2 * probe_s, PROBE_LAST_S)   # a loaded machine: each miss gives the answer longer
                await asyncio.sleep(0.2)   # an election takes a few heartbeats; nothing to wait on but the answer
    finally:
        await bus.close()
