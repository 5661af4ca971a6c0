"""A head whose run never arrives (the CLI died after renting it) stops itself: `yeto stack up --head --foreground
--await-run S` for real on this machine exits with its stack down S seconds after it started (SkyPilot's autodown
then ends the VM); the decision itself as a pure function."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from waiting import wait_for
from yeto.cli.head_watch import verdict
from yeto.infra import stack

YETO = str(Path(sys.executable).parent / "yeto")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(120)
def test_a_head_that_no_run_reaches_stops_await_run_seconds_after_it_started(tmp_path):
    state, out, await_s = tmp_path / "head", tmp_path / "head.out", 3.0
    env = {k: v for k, v in os.environ.items() if not k.startswith("YETO_NATS_")} | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([YETO, "--state-dir", str(state), "stack", "up", "--head", "--run-id", "r-never",
                             "--port", str(_free_port()), "--foreground", "--await-run", str(await_s)],
                            env=env, stdout=open(out, "w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "serving until" in out.read_text() or proc.poll() is not None, 60, "the head's supervisor")
        serving = time.monotonic()
        assert stack.status(state) is not None, out.read_text()          # the head's stack is up meanwhile
        assert proc.wait(60) == 0, out.read_text()
        assert time.monotonic() - serving >= await_s - 1.0, out.read_text()   # not long before the wait ran out
        assert f"no run arrived within --await-run {await_s:g}s" in out.read_text()
        assert stack.status(state) is None                                 # stopped: the VM may go
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stack.down(state)


def test_the_await_for_a_run_ends_with_its_first_event_and_never_cuts_a_run_short():
    assert verdict({}, 5.0, 60, started=0.0, await_s=10) == (None, 5.0)           # waits what is left
    why, _ = verdict({}, 10.0, 60, started=0.0, await_s=10)
    assert why == "no run arrived within --await-run 10s"
    assert verdict({"RunLaunched": 3.0}, 99.0, 60, started=0.0, await_s=10) == (None, None)   # the run came: it waits
    assert verdict({"RunStopped": 3.0}, 20.0, 60, started=0.0, await_s=10) == (None, 43.0)    # an end: the linger rules
    assert verdict({}, 1e9, 60) == (None, None)                                   # no --await-run: waits for ever
