"""The launcher's side of the stack's zygote (infra/stack/zygote.py): the same requests as backends/zygote.py's, one
JSON line each way, through `<state>/zygote.sock` instead of a child's pipes. The stack started it before this
launcher, so its imports may be done already; a first request sent while it still imports waits in the socket. The
zygote checks each rank's environment against its own (it answers an error, and the rank is spawned, where they
differ in anything but the per-rank credential and thread count). Closing here closes the connection only: the stack
owns the zygote and `yeto stack down` stops it.
"""
from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

from yeto.infra.stack import zygote as stack_zygote
from yeto.services.launcher.backends.zygote import MODULE


class StackZygote:
    def __init__(self, rec: dict) -> None:
        self.pid, self.path, self.lock = rec["pid"], rec["socket"], threading.Lock()
        self.conn: socket.socket | None = None
        self.lines = None

    @classmethod
    def attach(cls, state_dir: Path) -> StackZygote | None:
        """The stack's zygote under state_dir when one runs, else None (the launcher starts its own)."""
        rec = stack_zygote.running(state_dir)
        return cls(rec) if rec else None

    def serves(self, argv: list[str], env: dict[str, str]) -> bool:
        return argv[1:3] == ["-m", MODULE]

    def fork(self, argv: list[str], env: dict[str, str], *, log: Path, exit_file: Path, pgid: int) -> int | None:
        """The forked rank's pid, None when this rank must be spawned instead (the zygote gone, or it refused)."""
        if not self.serves(argv, env):
            return None
        line = json.dumps({"argv": argv[3:], "env": env, "log": str(log), "exit_file": str(exit_file), "pgid": pgid})
        with self.lock:
            try:
                return self._ask(line).get("pid")
            except (OSError, ValueError):
                self._drop()        # the next request connects again (a zygote the stack restarted)
                return None

    def _ask(self, line: str) -> dict:
        if self.conn is None:
            self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.conn.connect(self.path)
            self.lines = self.conn.makefile("r")
        self.conn.sendall((line + "\n").encode())
        return json.loads(self.lines.readline() or "{}")

    def _drop(self) -> None:
        for f in (self.lines, self.conn):
            if f is not None:
                f.close()
        self.conn = self.lines = None

    def close(self) -> None:
        with self.lock:
            self._drop()
