"""The local launcher's pre-imported torch learner (learners/torch/zygote.py): started with the launcher, it pays
the learners' imports (torch, transformers, numba: seconds each start) once, before a launch reaches it, and forks
each CPU island's ranks: the torch learner's, and the Megatron-Core and diffusion learners' (which import the same
torch, transformers and peft, and their own modules after the fork). A rank it cannot fork (the zygote gone, busy
with threads, another environment) is spawned as before; `fork` then answers None.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from yeto.schemas.learner_contract import FORKED

MODULES = FORKED
"""The learners (`python -m` modules) a rank forked from the zygote may run: the registry's forkable backends."""
ZYGOTE = "yeto.learners.torch.zygote"
PER_RANK = frozenset({"YETO_NATS_CREDS", "OMP_NUM_THREADS"})
"""The variables a forked rank may have other than the zygote's (both read after the imports: the credential at
connect, the thread count applied in the child). Any other difference could have been read by an import."""


def served(argv: list[str]) -> bool:
    """`argv` runs one of the learners the zygote forks (`python -m MODULE ...`)."""
    return len(argv) > 2 and argv[1] == "-m" and argv[2] in MODULES


def request(argv: list[str], env: dict[str, str], *, log: Path, exit_file: Path, pgid: int, session: bool = False) -> dict:
    """The zygote's request for the rank `argv` runs (learners/torch/zygote.py's module docstring); `session`: the
    rank leads a session of its own (a one-rank island)."""
    return {"argv": argv[3:], "env": env, "log": str(log), "exit_file": str(exit_file), "pgid": pgid,
            "module": argv[2], **({"session": True} if session else {})}


class Zygote:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.lock = dict(env), threading.Lock()
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, env=self.env, start_new_session=True, text=True)
        self.ready = False

    def serves(self, argv: list[str], env: dict[str, str]) -> bool:
        """A learner rank (MODULES) whose environment differs from the zygote's in PER_RANK variables only."""
        differ = {k for k in env.keys() | self.env.keys() if env.get(k) != self.env.get(k)}
        return served(argv) and differ <= PER_RANK

    def fork(self, argv: list[str], env: dict[str, str], *, log: Path, exit_file: Path, pgid: int,
             session: bool = False) -> int | None:
        """The forked rank's pid, None when this rank must be spawned instead."""
        if not self.serves(argv, env):
            return None
        line = request(argv, env, log=log, exit_file=exit_file, pgid=pgid, session=session)
        with self.lock:
            try:
                if not self.ready:          # its imports are done when it says so (the first request waits)
                    self.ready = "ready" in json.loads(self.proc.stdout.readline() or "{}")
                self.proc.stdin.write(json.dumps(line) + "\n")
                self.proc.stdin.flush()
                answer = json.loads(self.proc.stdout.readline() or "{}")
            except (OSError, ValueError):
                return None
        return answer.get("pid")

    def close(self) -> None:
        """Its stdin closed, the zygote ends (ranks it forked run on); one still importing has forked nothing and is
        stopped at once."""
        with self.lock:
            if not self.ready:
                self.proc.terminate()
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.wait(timeout=30)
