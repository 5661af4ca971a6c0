"""The stack's pre-imported torch learner (learners/torch/zygote.py with `--socket-fd`): started before anything else
of a local stack, and by `yeto launch` before its checks, so that its imports (torch, transformers, numba: the longest
part of a first launch on a CPU) overlap the CLI's checks, nats-server's start and the services' own imports instead
of following them. The launcher forks CPU ranks from it through `<state>/zygote.sock`
(services/launcher/backends/stack_zygote.py); `<state>/zygote.json` records its pid and start time, so the stack
record names it and `yeto stack down` stops it like any component.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from yeto.infra import procs

NAME = "learner-zygote"
# infra/bus/auth.py's CREDS_ENV, named here: `yeto launch` loads this module before the bus package, whose import (the
# schemas with numba, nats) would hold the zygote's start back ~0.5 CPU s (yeto/cli/launch/early.py)
CREDS_ENV = "YETO_NATS_CREDS"
MODULE = "yeto.learners.torch.zygote"
MAX_SOCKET_PATH = 100      # sun_path holds 108 bytes: a longer state directory keeps the launcher's own zygote


def socket_path(root: Path) -> Path:
    return Path(root) / "zygote.sock"


def record_path(root: Path) -> Path:
    return Path(root) / "zygote.json"


def running(root: Path) -> dict | None:
    """{"pid", "started_at", "socket"} of the stack's zygote under `root` while it runs, else None."""
    try:
        rec = json.loads(record_path(root).read_text())
    except (OSError, ValueError):
        return None
    return rec if procs.alive(rec.get("pid", -1), rec.get("started_at")) else None


def env() -> dict[str, str]:
    """What the launcher's ranks get (services/launcher/backends/local.py base_env), less their per-rank credential:
    the zygote refuses a rank whose environment differs in anything its imports could have read."""
    out = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out.pop(CREDS_ENV, None)
    return out


def start(root: Path) -> dict | None:
    """Start the stack's zygote under `root` unless one runs (idempotent); its record, None where the socket's path
    would be too long (the launcher then starts its own, as without a stack zygote)."""
    root = Path(root)
    if (rec := running(root)) is not None:
        return rec
    sock = socket_path(root)
    if len(str(sock).encode()) > MAX_SOCKET_PATH:
        return None
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = root / "logs" / f"{NAME}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    sock.unlink(missing_ok=True)         # an ended zygote's
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)              # the socket file is this user's alone
    try:
        server.bind(str(sock))
    finally:
        os.umask(umask)
    server.listen(8)                     # bound before the zygote starts: a launcher can connect at once
    with server, open(log, "ab") as out:     # detached as every component (components.spawn), with exactly env()
        pid = subprocess.Popen([sys.executable, "-m", MODULE, "--socket-fd", str(server.fileno())], stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                               pass_fds=(server.fileno(),), env=env()).pid
    started = procs.started_at(pid)
    rec = {"pid": pid, "started_at": started, "socket": str(sock)}
    record_path(root).write_text(json.dumps(rec))
    return rec


def stop(root: Path) -> bool:
    """Stop a zygote that `start` left behind with no stack to adopt it (a launch refused by its checks)."""
    rec = running(root)
    return rec is not None and procs.signal_if_ours(rec["pid"], rec["started_at"])
