"""`yeto stack up|status|down`: the local stack (nats-server, tape writer, services) under the state dir."""
from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time

from yeto.cli import head_restore, head_watch
from yeto.cli.common import run_id_arg, state_dir
from yeto.infra import stack
from yeto.infra.stack import watchdog
from yeto.infra.stack.health import tape_health

UP_WAIT_S = 20.0      # how long `stack up` waits for its tape writer to answer before it says the writer is not up


def register(sub) -> None:
    p = sub.add_parser("stack", help="start, inspect or stop the local stack",
                       description="The local stack runs detached under --state-dir ($YETO_HOME, default ~/.yeto): "
                                   "nats-server (127.0.0.1, JetStream on disk), the tape writer and the four services.")
    s = p.add_subparsers(dest="stack_cmd", metavar="ACTION", required=True)
    up = s.add_parser("up", help="start the stack if it is not running (idempotent)")
    up.add_argument("--port", type=int, default=0, help="nats-server port (default: a free one, kept across restarts; "
                    "4222 with --head)")
    up.add_argument("--head", action="store_true", help="a head VM's stack: all interfaces, TLS (self-signed, pinned "
                    "by learners through $YETO_NATS_CA) and per-run credentials; needs --run-id")
    up.add_argument("--run-id", default=None, type=run_id_arg, help="the run whose credentials the head issues (with --head)")
    up.add_argument("--host", action="append", default=[], help="a name or IP the certificate is valid for (repeat)")
    up.add_argument("--foreground", action="store_true", help="stay attached; SIGTERM or Ctrl-C stops the stack")
    up.add_argument("--linger", type=float, default=3600.0, metavar="SECONDS",
                    help="with --head --foreground: once the run has ended, stop the stack when the laptop copied it "
                         "back (`yeto pull`) or this long after the end, whichever comes first (default 3600)")
    up.add_argument("--await-run", type=float, default=1800.0, metavar="SECONDS",
                    help="with --head --foreground: stop the stack when no run arrived this long after the start "
                         "(the CLI that rented the head died before handing it the run; default 1800)")
    up.add_argument("--syncers", type=int, default=None, metavar="N",
                    help="run the syncer as N shards (syncer-K owns fragments p with p %% N == K); default 1, "
                         "or what the stack under the state dir last ran")
    up.add_argument("--cluster", type=int, default=None, metavar="N", help="run nats-server as an N-node JetStream "
                    "cluster on this machine (N >= 3, streams replicated on each) with two instances of each service "
                    "that can run twice (docs/CLUSTER.md); with --head, clients over TLS on every interface and routes over TLS "
                    "with a route credential; default 1, or what the stack under the state dir last ran")
    up.add_argument("--node", type=int, default=None, metavar="K", help="with --head and --peers: this machine runs "
                    "node K of a head over several VMs (`yeto launch --head-nodes 3`; SkyPilot's $SKYPILOT_NODE_RANK)")
    up.add_argument("--peers", default=None, metavar="A,B,C", help="with --head and --node: every node's address, in "
                    "node order, this one's included (SkyPilot's $SKYPILOT_NODE_IPS, commas or newlines); the nodes "
                    "route to each other on port 6222 over TLS with the bundle's route credential")
    up.add_argument("--no-watchdog", dest="watchdog", action="store_false", default=None,
                    help="run without the watchdog that starts a component again when it dies (at most 5 times in 10 "
                         "minutes each, each restart a ComponentRestarted event on the tape); default: with it, unless "
                         "$YETO_WATCHDOG=0, or as the stack under the state dir last ran")
    up.set_defaults(func=cmd_up)
    st = s.add_parser("status", help="which stack processes are alive")
    st.add_argument("--json", action="store_true", help='print {"state_dir", "url", "processes": [{name, up, pid, '
                    'restarts}]} (restarts: by the watchdog within its 10-minute window)')
    st.set_defaults(func=cmd_status)
    s.add_parser("down", help="stop what `up` started; the data stays").set_defaults(func=cmd_down)


def cmd_up(args) -> int:
    if args.head and not args.run_id:
        raise ValueError("--head needs --run-id: a head serves one run")
    before = head_restore.prepare(state_dir(args), args.run_id) if args.head else None
    peers = args.peers.replace("\n", ",").split(",") if args.peers else None
    if (peers is None) != (args.node is None) or (peers and not args.head):
        raise ValueError("--node and --peers go together, with --head: one node of a head over several VMs")
    rec = stack.up(state_dir(args), port=args.port, head_run=args.run_id if args.head else None,
                   hosts=["127.0.0.1", "localhost", *args.host], syncers=args.syncers,
                   cluster=args.cluster, node=args.node, peers=[p.strip() for p in peers if p.strip()] if peers else None,
                   before_components=before, watch=args.watchdog)
    print(f"stack up at {rec['url']} (state {state_dir(args)})")
    for name, pid in rec["pids"].items():
        print(f"  {name:<12} pid {pid}")
    if rec.get("ca_file"):
        print(f"  learners pin the certificate with YETO_NATS_CA={rec['ca_file']}")
    print(f"  bus credentials (0600, passed by path in $YETO_NATS_CREDS): {stack.bus_auth.auth_dir(state_dir(args))}")
    healthy = _report_health(args, rec["url"], wait_s=UP_WAIT_S)
    if args.foreground and args.head:
        # a head over several VMs has no mirror: its streams are on every node (and one mirror, not three, would do)
        return head_watch.run(state_dir(args), rec["url"], args.run_id, args.linger, args.await_run,
                              mirror=not rec.get("peers"))
    if args.foreground:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(5.0):
            pass
        print(f"stopped: {', '.join(stack.down(state_dir(args)))}")
    return 0 if healthy else 1


def _report_health(args, url: str, *, wait_s: float = 0.0) -> bool:
    """Print each component that is not running and the tape's line when it is not current; True if all is well.
    `wait_s`: how long a tape writer that is starting may take to answer."""
    def tape_exited() -> bool:
        return not (stack.status(state_dir(args)) or {}).get("tape", True)
    health = asyncio.run(tape_health(stack.stack_url(state_dir(args)) or url, wait_s=wait_s,   # as the operator
                                     exited=tape_exited))
    dead = [name for name, ok in (stack.status(state_dir(args)) or {}).items() if not ok]
    for name in dead:
        print(f"  {name:<12} DOWN: it exited; its log is {stack.StackPaths(state_dir(args)).logs / f'{name}.log'}",
              file=sys.stderr)
    if (line := health.line()) is not None:
        print(f"  tape         {line}", file=sys.stderr)
    return not dead and line is None


def cmd_status(args) -> int:
    st = stack.status(state_dir(args))
    rec = stack.read_record(stack.StackPaths(state_dir(args))) if st is not None else None
    if getattr(args, "json", False):
        restarts = watchdog.read_counts(state_dir(args)) if rec and rec.get(watchdog.NAME) else {}
        procs = [{"name": n, "up": ok, "pid": rec["pids"][n], "restarts": restarts.get(n, {}).get("restarts", 0)}
                 for n, ok in (st or {}).items()] if rec else []
        print(json.dumps({"state_dir": str(state_dir(args)), "url": rec["url"] if rec else None, "processes": procs}))
        return 0 if st and all(st.values()) else 1
    if st is None:
        print(f"no stack under {state_dir(args)} (start one with `yeto stack up`)")
        return 1
    assert rec is not None, "status() read it a moment ago"
    print(f"stack at {rec['url']} (state {state_dir(args)})")
    restarts = watchdog.read_counts(state_dir(args)) if rec.get(watchdog.NAME) else {}
    for name, ok in st.items():
        print(f"  {name:<12} {'up' if ok else 'DOWN'}  pid {rec['pids'][name]}{_restarts(restarts.get(name))}")
    health = asyncio.run(tape_health(stack.stack_url(state_dir(args)) or rec["url"]))   # as the stack's operator
    print(f"  tape         {health.line() or f'current at seq {health.tape_seq}'}")
    return 0 if all(st.values()) and health.line() is None else 1


def _restarts(count: dict | None) -> str:
    """What the watchdog did to one component within its window, for `stack status`."""
    if not count or not count.get("restarts"):
        return ""
    when = time.strftime("%H:%M:%S", time.localtime(count.get("last", 0)))
    gave_up = ", not started again: its log says why; `yeto stack up` once fixed" if count.get("gave_up") else ""
    return f"  (restarted {count['restarts']}x by the watchdog, last at {when}{gave_up})"


def cmd_down(args) -> int:
    stopped = stack.down(state_dir(args))
    print(f"stopped: {', '.join(stopped)}" if stopped else "no stack was running")
    return 0
