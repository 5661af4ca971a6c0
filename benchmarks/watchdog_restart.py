"""How soon the stack's watchdog (infra/stack/watchdog.py) starts a killed component again, on a real local stack.

Each of --components is killed with SIGKILL in turn; the time from the kill to its new process alive as stack.json
records it is printed, with the load average. A second kill of one component waits its backoff (1 s), so each is
killed once, --gap-s apart. Last line: watchdog_restart_max_s=<the longest>.

    .venv/bin/python benchmarks/watchdog_restart.py [--components finalizer,syncer,tape,nats-server,planner]
"""
from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

from yeto.infra import stack
from yeto.infra.stack.components import alive_in


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--components", default="finalizer,syncer,tape,nats-server,planner")
    p.add_argument("--gap-s", type=float, default=3.0, help="between two kills (default 3)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="yeto-watchdog-")) / "home"
    stack.up(root)
    record = lambda: stack.read_record(stack.StackPaths(root))  # noqa: E731
    times = []
    try:
        for name in args.components.split(","):
            old = record()["pids"][name]
            killed = time.monotonic()
            os.kill(old, signal.SIGKILL)
            while not ((r := record()) and r["pids"].get(name) != old and alive_in(r, name)):
                time.sleep(0.01)        # polls the record: the watchdog's start is what is timed
            times.append(time.monotonic() - killed)
            print(f"{name}: started again {times[-1]:.2f} s after its kill -9 (load {os.getloadavg()[0]:.1f})", flush=True)
            time.sleep(args.gap_s)
    finally:
        stack.down(root)
    print(f"watchdog_restart_max_s={max(times):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
