"""`yeto stack up|status|down`: the local stack (nats-server, tape writer, services) under the state dir."""
from __future__ import annotations

from yeto.cli.common import state_dir
from yeto.infra import stack


def register(sub) -> None:
    p = sub.add_parser("stack", help="start, inspect or stop the local stack",
                       description="The local stack runs detached under --state-dir ($YETO_HOME, default ~/.yeto): "
                                   "nats-server (127.0.0.1, JetStream on disk), the tape writer and the four services.")
    s = p.add_subparsers(dest="stack_cmd", metavar="ACTION", required=True)
    up = s.add_parser("up", help="start the stack if it is not running (idempotent)")
    up.add_argument("--port", type=int, default=0, help="nats-server port (default: a free one, kept across restarts)")
    up.set_defaults(func=cmd_up)
    s.add_parser("status", help="which stack processes are alive").set_defaults(func=cmd_status)
    s.add_parser("down", help="stop what `up` started; the data stays").set_defaults(func=cmd_down)


def cmd_up(args) -> int:
    rec = stack.up(state_dir(args), port=args.port)
    print(f"stack up at {rec['url']} (state {state_dir(args)})")
    for name, pid in rec["pids"].items():
        print(f"  {name:<12} pid {pid}")
    return 0


def cmd_status(args) -> int:
    st = stack.status(state_dir(args))
    if st is None:
        print(f"no stack under {state_dir(args)} (start one with `yeto stack up`)")
        return 1
    rec = stack.read_record(stack.StackPaths(state_dir(args)))
    print(f"stack at {rec['url']} (state {state_dir(args)})")
    for name, ok in st.items():
        print(f"  {name:<12} {'up' if ok else 'DOWN'}  pid {rec['pids'][name]}")
    return 0 if all(st.values()) else 1


def cmd_down(args) -> int:
    stopped = stack.down(state_dir(args))
    print(f"stopped: {', '.join(stopped)}" if stopped else "no stack was running")
    return 0
