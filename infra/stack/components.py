"""The stack's processes besides nats-server: the command line of each and how one is started, detached."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from yeto.infra import procs
from yeto.schemas.subjects import SERVICES

# Safe as several instances (runner.py's rule for scaling: events reach each, commands one): every reaction to an
# event is a publish with an id derived from its cause (de-duplicated), every effect a command's. Not the syncer: two
# instances of one shard would split its pushes between two merges (one per shard instead, `--syncers N`), nor the
# tape writer (DuckDB has one writer).
SCALABLE = ("planner", "launcher", "finalizer")
WATCHDOG = "watchdog"           # the component that starts the others again (infra/stack/watchdog.py)
WATCHDOG_ENV = "YETO_WATCHDOG"  # 0: stacks start without it (`yeto stack up --no-watchdog`)


def watchdog_command(root: Path) -> list[str]:
    """Not imported by the package: `python -m` runs the module as __main__ (runpy warns of one imported first)."""
    return [sys.executable, "-m", "yeto.infra.stack.watchdog", "--state-dir", str(root)]


def watchdog_by_default() -> bool:
    return os.environ.get(WATCHDOG_ENV, "1") != "0"


def component_commands(url: str, root: Path, db: Path, syncers: int = 1, instances: int = 1) -> dict[str, list[str]]:
    """Every process of the stack; with `syncers` > 1 the syncer runs as that many shards (syncer-K, `--shard K/N`);
    with `instances` > 1 each SCALABLE service runs that many times (launcher-0, launcher-1, ...)."""
    py = sys.executable
    cmds = {"tape": [py, "-m", "yeto.infra.tape", "--nats-url", url, "--db", str(db)]}
    for name in SERVICES:
        base = [py, "-m", f"yeto.services.{name}", "--nats-url", url, "--state-dir", str(root)]
        if name == "syncer" and syncers > 1:
            for k in range(syncers):
                cmds[f"syncer-{k}"] = [*base, "--shard", f"{k}/{syncers}", "--instance", f"syncer-{k}"]
        elif name in SCALABLE and instances > 1:
            for k in range(instances):
                cmds[f"{name}-{k}"] = [*base, "--instance", f"{name}-{k}"]
        else:
            cmds[name] = base
    return cmds


def placed(cmds: dict[str, list[str]], node: int, num_nodes: int) -> dict[str, list[str]]:
    """The components node `node` of a head over `num_nodes` machines runs: tape writer K (`tape`, `tape-1`) on node K,
    syncer shard K on node (K + 1) % N (its standby, `syncer-K-standby`, on the node after), and the i-th SCALABLE
    service's instance j on node (i + j) % N, so the two instances of each run on two different machines and a machine's
    loss leaves one of each (docs/CLUSTER.md)."""
    def home(name: str) -> int:
        if name.endswith("-standby"):
            return (home(name.removesuffix("-standby")) + 1) % num_nodes
        base, _, k = name.rpartition("-") if "-" in name else (name, "", "0")
        if base == "tape":
            return int(k) % num_nodes
        if base == "syncer":
            return (int(k) + 1) % num_nodes
        return (SCALABLE.index(base) + int(k)) % num_nodes
    return {name: cmd for name, cmd in cmds.items() if home(name) == node}


def spawn(cmd: list[str], log_path: Path, env: dict | None = None) -> tuple[int, float | None]:
    """Start a detached component; its pid and start time."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, **(env or {})})
    return proc.pid, procs.started_at(proc.pid)


def alive_in(rec: dict, name: str) -> bool:
    """The process a stack record names runs and is the one recorded (its start time); a record without one
    proves nothing."""
    started = rec.get("started_at", {}).get(name)
    return started is not None and procs.alive(rec["pids"].get(name, -1), started)
