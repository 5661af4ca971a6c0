"""The `live_stack` fixture: a real nats-server with the stack's users file (learners of two runs) and a real tape writer."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from hostile_stack import ATTACKER, QUERY_TIMEOUT_S, VICTIM
from yeto.infra.bus import auth as bus_auth
from yeto.infra.nats.server import NatsServer
from yeto.infra.stack import StackPaths


@pytest.fixture
def live_stack(tmp_path, monkeypatch, request):
    """(server, state dir, tape writer process); the writer's query deadline is QUERY_TIMEOUT_S, or the test's
    indirect parameter."""
    deadline_s = getattr(request, "param", QUERY_TIMEOUT_S)
    state = tmp_path / "state"
    users = bus_auth.prepare(state, ((VICTIM, "island-0"), (VICTIM, "island-1"), (ATTACKER, "island-0")))
    srv = NatsServer(state / "nats", users_file=users).start()
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(state)))
    env = {**os.environ, bus_auth.CREDS_ENV: str(bus_auth.service_file(state))}
    writer = subprocess.Popen([sys.executable, "-m", "yeto.infra.tape", "--nats-url", srv.url, "--db",
                               str(StackPaths(state).db), "--query-timeout", str(deadline_s)], env=env,
                              stdout=open(tmp_path / "tape.log", "ab"), stderr=subprocess.STDOUT)
    try:
        yield srv, state, writer
    finally:
        if writer.poll() is None:
            writer.send_signal(signal.SIGTERM)
            writer.wait(30)
        srv.stop()
