"""Learner processes inside namespaces: start, timestamp every JSON progress line on arrival, kill by pid.

Each arm's numbers come from these lines (`python -m yeto.learners.torch` prints one per step with
--log-every-s 0, and `heldout` on --eval-every steps), stamped with this process's monotonic clock, so
every arm is timed the same way, from the moment its processes are started.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

LEARNER = [sys.executable, "-m", "yeto.learners.torch"]
STARTED: list[Proc] = []
"""Every process started here, so that a run that stops early (an error, SIGTERM) kills what it left running."""


class Proc:
    """One process; `lines` holds (seconds since `t0`, parsed JSON) for every JSON line it printed."""

    def __init__(self, argv: list[str], *, log: Path, env: dict | None = None, t0: float | None = None) -> None:
        self.t0 = t0 if t0 is not None else time.monotonic()
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        # A session of its own, as each island is a machine of its own: with Linux's autogroup scheduling (on here:
        # /proc/sys/kernel/sched_autogroup_enabled) the CPU is shared session by session, and learners left in this
        # process's session weighed together as much as one busy service of Yeto's stack (each its own session).
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                                          "YETO_LOG_FORMAT": "json", **(env or {})}, start_new_session=True)
        self.lines: list[tuple[float, dict]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        STARTED.append(self)

    def _read(self) -> None:
        with open(self.log, "w") as out:
            for raw in self.proc.stdout:
                text = raw.decode(errors="replace")
                out.write(text)
                if text.startswith("{"):
                    try:
                        self.lines.append((time.monotonic() - self.t0, json.loads(text)))
                    except ValueError:
                        pass

    def steps(self) -> list[tuple[float, dict]]:
        return [(t, d) for t, d in self.lines if d.get("event") == "step"]

    def done(self) -> dict | None:
        return next((d for _, d in self.lines if d.get("event") == "done"), None)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def kill_started() -> None:
    """SIGKILL every process started here that still runs (a no-op after a run that finished)."""
    for p in STARTED:
        p.kill()


def curve(proc: Proc) -> list[tuple[float, int, float]]:
    """(seconds, step, held-out loss) at every evaluated step."""
    return [(t, d["step"], d["heldout"]) for t, d in proc.steps() if d.get("heldout") is not None]


def time_to(curve_: list[tuple[float, int, float]], target: float) -> float | None:
    return next((t for t, _, loss in curve_ if loss <= target), None)


def stall(proc: Proc, kill_at: float) -> tuple[float, float, float]:
    """(median and longest step time before `kill_at`, longest after it): each step's own `seconds`
    (forward, backward, optimizer and the sync at the step boundary; not the held-out evaluation).
    The first step is left out (warm-up)."""
    steps = [(t, d["seconds"]) for t, d in proc.steps()[1:]]
    before = [s for t, s in steps if t < kill_at]
    after = [s for t, s in steps if t >= kill_at]
    nan = float("nan")
    return (statistics.median(before) if before else nan), max(before, default=nan), max(after, default=nan)


def wait_all(procs: list[Proc], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        code = p.wait(max(1.0, deadline - time.monotonic()))
        if code != 0:
            raise RuntimeError(f"{p.proc.args[-1]!r}... exited {code}; see {p.log}")
