"""The local stack: nats-server, the tape writer and the four services as detached processes.

Everything lives under one state directory (0700); `stack.json` there records what `up` started (pids,
their start times and the NATS URL, no secret), so `down` stops exactly those processes and nothing else,
and keeps the data. The bus admits only the stack's identities (infra/bus/auth.py, under <state>/auth):
components get the service credential and this process the operator's, through $YETO_NATS_CREDS.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from yeto.infra import procs
from yeto.infra.bus import auth as bus_auth
from yeto.infra.nats import cluster as natscluster
from yeto.infra.nats.cluster import node_names
from yeto.infra.nats.server import ensure_streams
from yeto.infra.run_paths import run_path
from yeto.infra.stack import forkserver
from yeto.infra.stack import zygote as stack_zygote
from yeto.infra.stack.components import WATCHDOG, component_commands, placed, spawn, watchdog_by_default, watchdog_command
from yeto.infra.stack.components import alive_in as _alive
from yeto.infra.stack.servers import head_nodes, head_server, local_url, restart_nodes, servers_for
from yeto.infra.stack.stop import stop_components, stop_islands

__all__ = ["StackPaths", "alive", "down", "head_server", "local_url", "locked", "read_record", "stack_url", "status", "up"]


@dataclass(frozen=True)
class StackPaths:
    root: Path

    @property
    def nats(self) -> Path: return self.root / "nats"
    @property
    def db(self) -> Path: return self.root / "tape.duckdb"
    @property
    def runs(self) -> Path: return self.root / "runs"
    @property
    def logs(self) -> Path: return self.root / "logs"
    @property
    def record(self) -> Path: return self.root / "stack.json"
    @property
    def lock(self) -> Path: return self.root / "stack.lock"

    def run_dir(self, run_id: str) -> Path:
        return run_path(self.root, run_id)   # ValueError unless a run id whose folder stays under runs/


alive = procs.alive


@contextlib.contextmanager
def locked(paths: StackPaths) -> Iterator[None]:
    """The record's one writer at a time (an exclusive flock on <state>/stack.lock, released when its holder ends,
    however it ends): `up` holds it from its first look at the record to its last write, `down` and a standby's
    start (infra/stack/standby.py) for their read and write. A fresh stack's record lists its components only from
    its second write; a `down` between the two stopped nats-server and left the components running, and two
    `yeto launch` at once each started a stack in one state directory (one of them without the tape: DuckDB's lock)."""
    paths.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(paths.lock, "a") as f:          # not inherited: every child the holder starts runs without it
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def read_record(paths: StackPaths) -> dict | None:
    try:
        return json.loads(paths.record.read_text())
    except (OSError, ValueError):
        return None


def stack_url(state_dir: Path) -> str | None:
    """The NATS URL of the stack running under state_dir, or None when it is down. This process then talks to
    it as the operator: $YETO_NATS_CREDS (and $YETO_NATS_CA for a head) point at the stack's files."""
    rec = read_record(StackPaths(Path(state_dir)))
    if not (rec and _serving(rec)):
        return None
    os.environ.update(operator_env(Path(state_dir), rec))
    return rec["url"]


def _serving(rec: dict) -> bool:
    """Some recorded nats-server runs (in a cluster the others' clients have moved to it)."""
    return any(_alive(rec, n) for n in node_names(rec))


def _commands(rec: dict, paths: StackPaths, url: str) -> dict[str, list[str]]:
    """The components of a recorded stack: a cluster runs two instances of each service that can run twice. A head
    node on a machine of its own runs its share of them (components.placed) and the credential follower, which admits
    on this node every learner a launcher on another node issued (infra/head/credentials.py). Such a head keeps two
    tapes, on nodes 0 and 1, each written from its own durable consumer: either VM's loss leaves one that `yeto sql`
    is answered from (the writers serve one queue group). Each syncer shard runs with --lease and a standby on the next
    node takes its lease over when its VM is lost."""
    cmds = component_commands(url, paths.root, paths.db, rec.get("syncers", 1), 2 if rec.get("cluster", 1) > 1 else 1)
    keeper = {WATCHDOG: watchdog_command(paths.root)} if rec.get(WATCHDOG) else {}   # one on every node
    if not rec.get("peers"):
        return cmds | keeper
    follower = [sys.executable, "-m", "yeto.infra.head.credentials", "--nats-url", url, "--state-dir", str(paths.root),
                "--run-id", rec["run_id"]]
    cmds["tape-1"] = [*cmds["tape"], "--consumer", "tape-1"]     # a second tape, its own consumer, on another VM's disk
    for name in [n for n in cmds if n == "syncer" or n.startswith("syncer-")]:     # each shard leased, a standby beside
        cmds[name] = [*cmds[name], "--lease", "--lease-node", f"yeto-{rec['node']}"]  # (services/syncer/lease.py)
        cmds[f"{name}-standby"] = [*cmds[name], "--instance", f"{name}-standby"]
    return placed(cmds, rec["node"], len(rec["peers"])) | {"credentials": follower} | keeper


def start_dead(paths: StackPaths, rec: dict, names: Collection[str] | None = None,
               on_error: Callable[[str, OSError], None] | None = None) -> None:
    """Start again the recorded components that died (of `names`, or all), the learners' zygote among them, as `stack
    up` does; `rec` is updated in place and written by the caller, under the lock. `on_error(name, error)`: a start that
    fails is told there and the others still start (the watchdog); without it, the error is raised."""
    env = component_env(paths.root, rec)
    cmds = _commands(rec, paths, rec["url"])
    for name in [n for n in (*cmds, stack_zygote.NAME) if names is None or n in names]:
        try:
            if name == stack_zygote.NAME:
                if name in rec["pids"] and (z := stack_zygote.start(paths.root)):     # a zygote that died, again
                    rec["pids"][name], rec["started_at"][name] = z["pid"], z["started_at"]
            elif not _alive(rec, name):
                rec["pids"][name], rec.setdefault("started_at", {})[name] = spawn(cmds[name], paths.logs / f"{name}.log",
                                                                                  env=env)
        except OSError as e:
            if on_error is None:
                raise
            on_error(name, e)


def operator_env(root: Path, rec: dict) -> dict[str, str]:
    env = {bus_auth.CREDS_ENV: str(bus_auth.operator_file(root))} if bus_auth.users_file(root).exists() else {}
    return env | ({"YETO_NATS_CA": rec["ca_file"]} if rec.get("ca_file") else {})


def component_env(root: Path, rec: dict) -> dict[str, str]:
    return operator_env(root, rec) | {bus_auth.CREDS_ENV: str(bus_auth.service_file(root))}


async def _ensure_streams(url: str) -> None:
    from yeto.infra.bus import connect

    bus = await connect(url, name="stack-up")
    await ensure_streams(bus)
    await bus.close()


def up(state_dir: Path, *, port: int = 0, head_run: str | None = None, hosts: list[str] | None = None,
       syncers: int | None = None, cluster: int | None = None, node: int | None = None, peers: list[str] | None = None,
       before_components: Callable[[str], None] | None = None, watch: bool | None = None) -> dict:
    """Start the stack if it is not running (idempotent); returns the record of what runs.
    `head_run` starts a head VM's stack instead: TLS and credentials for that run, on all interfaces.
    `syncers` > 1 runs the syncer as that many shards, each owning the fragments p with p % N == K; `cluster` N >= 3
    runs nats-server as N nodes of a JetStream cluster on this machine, streams replicated on each (up to 5), and
    two instances of each service that can run twice (infra/stack/components.py). None: as the stack under
    state_dir last ran, else 1. `before_components(url)` runs once the streams exist and before any component
    starts, on a fresh start only (a replacement head republishes its mirror there: infra/head/restore.py).
    `node` K and `peers` (every node's address, in node order): a head whose nodes run on machines of their own; this
    machine runs node K alone, routed to the others, and its share of the components (docs/CLUSTER.md).
    `watch`: run the watchdog (infra/stack/watchdog.py), which starts again a component that dies; None: as the stack
    under state_dir last ran, else on unless $YETO_WATCHDOG is 0."""
    if peers is not None:
        natscluster.check_size(len(peers))
        if not head_run or node is None or not 0 <= node < len(peers) or cluster not in (None, len(peers)):
            raise ValueError(f"--peers names {len(peers)} nodes: it needs --head, --node K (0 <= K < {len(peers)}) and "
                             f"--cluster {len(peers)} or none")
        cluster = len(peers)
    if syncers is not None and syncers < 1:
        raise ValueError(f"--syncers {syncers}: need at least one syncer")
    if cluster is not None:
        natscluster.check_size(cluster)
    paths = StackPaths(Path(state_dir))
    with locked(paths):
        return _up(paths, port=port, head_run=head_run, hosts=hosts, syncers=syncers, cluster=cluster, node=node,
                   peers=peers, before_components=before_components, watch=watch)


def _up(paths: StackPaths, *, port: int, head_run: str | None, hosts: list[str] | None, syncers: int | None,
        cluster: int | None, node: int | None, peers: list[str] | None,
        before_components: Callable[[str], None] | None, watch: bool | None = None) -> dict:
    """`up` with the record's lock held."""
    rec = read_record(paths)
    if rec and _serving(rec):
        for flag, key, want in (("--syncers", "syncers", syncers), ("--cluster", "cluster", cluster)):
            if want is not None and want != rec.get(key, 1):
                raise ValueError(f"the stack under {paths.root} runs with {flag} {rec.get(key, 1)}; "
                                 f"`yeto stack down` first to change {flag}")
        if watch is not None and watch != bool(rec.get(WATCHDOG)):
            raise ValueError(f"the stack under {paths.root} runs {'with' if rec.get(WATCHDOG) else 'without'} its "
                             f"watchdog; `yeto stack down` first to change --no-watchdog")
        restart_nodes(paths, rec)
        start_dead(paths, rec)
        _write_record(paths, rec)
        os.environ.update(operator_env(paths.root, rec))
        return rec
    paths.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(paths.root, 0o700)     # logs, tape and credentials: this user's alone
    paths.logs.mkdir(parents=True, exist_ok=True)
    early = None if head_run else stack_zygote.start(paths.root)     # first: its imports overlap all that follows
    forker = forkserver.start(paths.logs / "forkserver.log")    # the services' imports, once, beside nats-server's start
    try:
        return _fresh(paths, rec, forker, early, port=port, head_run=head_run, hosts=hosts, syncers=syncers,
                      cluster=cluster, node=node, peers=peers, before_components=before_components, watch=watch)
    finally:
        forkserver.stop(forker)      # it answered and ended, or the start failed before the components


def _fresh(paths: StackPaths, rec: dict | None, forker: subprocess.Popen | None, early: dict | None, *, port: int,
           head_run: str | None, hosts: list[str] | None, syncers: int | None, cluster: int | None, node: int | None,
           peers: list[str] | None, before_components: Callable[[str], None] | None, watch: bool | None = None) -> dict:
    """`up`'s start of a stack that does not run: nats-server, the streams, then every component not still running
    (forked by `forker`, infra/stack/forkserver.py, where it can)."""
    prev_port = rec["port"] if rec else 0
    if peers:       # this machine keeps one node's store: nothing to compare with the others' here
        size = len(peers)
        servers = head_nodes(paths, node, peers, port=port or prev_port, hosts=hosts)
    else:
        size = natscluster.check_store(paths.nats, cluster or (rec or {}).get("cluster") or None)
        servers = servers_for(paths, size, port=port or prev_port, head_run=head_run, hosts=hosts,
                              nodes=(rec or {}).get("nodes"))
    for server in servers.values():
        server.start(detach=True)
    url = (natscluster.peers_url(peers, next(iter(servers.values())).port) if peers
           else natscluster.cluster_url(servers) if size > 1 else local_url(servers[natscluster.SINGLE]))
    pids, started = {n: s.pid for n, s in servers.items()}, {n: procs.started_at(s.pid) for n, s in servers.items()}
    first = next(iter(servers.values()))
    ca = paths.root / "tls" / "server.pem" if peers else first.tls.cert_file if first.tls else None   # what clients pin
    new: dict = {"url": url, "ca_file": str(ca) if ca else None}
    os.environ.update(operator_env(paths.root, new))
    asyncio.run(natscluster.ready(url, natscluster.replicas(size)) if size > 1 else _ensure_streams(url))
    if before_components is not None:
        before_components(url)
    # Only nats-server died (killed, crashed): the components still run and reconnect to the same URL, so
    # keep them. Starting them again would put two tape writers on one DuckDB file and two syncers on one run.
    prev = rec or {}
    survivors = {n: p for n, p in prev.get("pids", {}).items()
                 if n not in (*node_names(prev), stack_zygote.NAME) and _alive(prev, n)}     # the zygote: `early`
    if rec and rec["url"] != url:
        for n, pid in survivors.items():      # connected to an address that is gone: replace them
            procs.signal_if_ours(pid, rec.get("started_at", {}).get(n))
        survivors = {}
    syncers = syncers or (rec or {}).get("syncers", 1)
    if watch is None:
        watch = bool(prev[WATCHDOG]) if WATCHDOG in prev else watchdog_by_default()
    new |= {"port": first.port, "pids": pids, "started_at": started, "started": time.time(), "syncers": syncers,
            "cluster": size, "nodes": natscluster.node_ports(servers), WATCHDOG: watch}
    if peers:
        new |= {"node": node, "peers": peers, "run_id": head_run}
    cmds = _commands(new, paths, url)
    for name in survivors.keys() & cmds.keys():
        pids[name], started[name] = survivors[name], prev["started_at"][name]
    fresh = {name: cmd for name, cmd in cmds.items() if name not in survivors}
    if early:       # started first of all: recorded at once (a reader between the two writes saw no zygote)
        pids[stack_zygote.NAME], started[stack_zygote.NAME] = early["pid"], early["started_at"]
    # Recorded before any component starts: a component acts as soon as it is up (a forked one at once, a head's run
    # may be waiting on the bus already) and reads the record for the certificate its islands pin and the servers it
    # reloads after issuing a credential (`_write_record`'s docstring).
    _write_record(paths, new)
    for name, (pid, at) in forkserver.fork_all(forker, fresh, paths.logs, component_env(paths.root, new)).items():
        pids[name], started[name] = pid, at
    _write_record(paths, new)
    return new


def _write_record(paths: StackPaths, rec: dict) -> None:
    """The record, replaced whole (a file of its own renamed over it): components read it while they run, the
    launcher for the certificate islands pin (`ca_file`) and, through bus_auth.reload_server, the nats-server pids to
    reload once it has issued a credential. A fresh stack records its servers before its components start and again
    with their pids; written in place, a reader between the truncation and the write found no record (2026-12-06: with
    the services forked, islands shipped without the CA and credentials the server never loaded)."""
    tmp = paths.record.with_name(f".{paths.record.name}.{os.getpid()}")
    bus_auth.write_secret(tmp, json.dumps(rec, indent=2))   # no secret inside; private all the same
    os.replace(tmp, paths.record)


def status(state_dir: Path) -> dict[str, bool] | None:
    rec = read_record(StackPaths(Path(state_dir)))
    return None if rec is None else {name: _alive(rec, name) for name in rec["pids"]}


def down(state_dir: Path, timeout: float = 15.0) -> list[str]:
    """Stop what `up` started (services first, nats-server last) and the local islands; keeps the data.
    Only processes that are still the ones recorded are signalled (infra/stack/stop.py). Returns what was stopped."""
    paths = StackPaths(Path(state_dir))
    if not paths.root.is_dir():
        return []
    with locked(paths):      # a stack starting now: its whole record, once its start has written it
        rec = read_record(paths)
        if not rec:
            return []
        stopped = stop_components(rec, timeout) + stop_local_islands(paths, timeout)
        paths.record.unlink(missing_ok=True)
    return stopped


def stop_local_islands(paths: StackPaths, timeout: float = 15.0) -> list[str]:
    """Stop the learner process groups the local launcher started: without the stack they can no longer
    sync, and nothing else would stop them."""
    return stop_islands(paths.runs, timeout)
