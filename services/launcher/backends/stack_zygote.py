"""The launcher's side of the stack's zygote (infra/stack/zygote.py): the same requests as backends/zygote.py's, one
JSON line each way, through `<state>/zygote.sock` instead of a child's pipes. The stack started it before this
launcher, so its imports may be done already; a first request sent while it still imports waits in the socket. The
zygote checks each rank's environment against its own (it answers an error, and the rank is spawned, where they
differ in anything but the per-rank credential and thread count). Each request has its own connection; the stack owns
the zygote and `yeto stack down` stops it.
"""
from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

from yeto.infra.stack import zygote as stack_zygote
from yeto.services.launcher.backends.zygote import request, served


class StackZygote:
    """One connection per request: the zygote serves one connection at a time (learners/torch/zygote.py `serve`), so a
    launcher instance that kept its connection open held every other instance's forks until it went. Two launchers of
    a clustered stack: the second's island started minutes late, and a redelivered StartIsland started one twice (the
    full run at 5e0324f)."""

    def __init__(self, rec: dict) -> None:
        self.path, self.lock = rec["socket"], threading.Lock()

    @classmethod
    def attach(cls, state_dir: Path) -> StackZygote | None:
        """The stack's zygote under state_dir when one runs, else None (the launcher starts its own)."""
        rec = stack_zygote.running(state_dir)
        return cls(rec) if rec else None

    def serves(self, argv: list[str], env: dict[str, str]) -> bool:
        return served(argv)

    def fork(self, argv: list[str], env: dict[str, str], *, log: Path, exit_file: Path, pgid: int,
             session: bool = False) -> int | None:
        """The forked rank's pid, None when this rank must be spawned instead (the zygote gone, or it refused)."""
        if not self.serves(argv, env):
            return None
        line = json.dumps(request(argv, env, log=log, exit_file=exit_file, pgid=pgid, session=session))
        with self.lock:
            try:
                return self._ask(line).get("pid")
            except (OSError, ValueError):
                return None         # the zygote gone (the stack restarts it): this rank is spawned

    def _ask(self, line: str) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            conn.sendall((line + "\n").encode())
            with conn.makefile("r") as lines:
                return json.loads(lines.readline() or "{}")

    def close(self) -> None:
        """Nothing to close: each request had its own connection."""
