"""Secrets stay secret: a real stack with authentication leaves no password on a command line, in its printed
output, logs, non-secret files, tape or store, or in a connection error; secret files are 0600 and the state
dir 0700; TLS checks the server's name unless a certificate is pinned."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from waiting import wait_for
from yeto.cli.main import main
from yeto.infra import stack
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _own_env(monkeypatch):
    for name in (bus_auth.CREDS_ENV, "YETO_NATS_CA", "YETO_NATS_URL", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)


def _mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def test_a_running_stack_keeps_every_password_out_of_sight(tmp_path, capsys, monkeypatch):
    state = tmp_path / "home"
    assert main(["--state-dir", str(state), "stack", "up"]) == 0
    try:
        creds = bus_auth.issue_learner(state, "r-secret", "island-0")   # what the launcher does for an island
        assert creds is not None
        monkeypatch.setenv(bus_auth.CREDS_ENV, str(creds))
        asyncio.run(_learner_reaches_the_bus(stack.read_record(stack.StackPaths(state))["url"]))
        assert main(["--state-dir", str(state), "stack", "status"]) == 0
        wait_for(lambda: (state / "tape.duckdb").exists(), 60, "the tape writer to open the tape")
        rec = stack.read_record(stack.StackPaths(state))
        auth = bus_auth.auth_dir(state)
        passwords = [json.loads(p.read_text())["password"].encode() for p in auth.rglob("*.json")]
        assert len(passwords) == 3     # operator, service, the island's learner

        printed = capsys.readouterr()
        places = {"stdout": printed.out.encode(), "stderr": printed.err.encode()}
        for name, pid in rec["pids"].items():
            places[f"{name} cmdline"] = Path(f"/proc/{pid}/cmdline").read_bytes()
            places[f"{name} environ"] = Path(f"/proc/{pid}/environ").read_bytes()   # a path to a file, not the secret
        for path in state.rglob("*"):
            if path.is_file() and auth not in path.parents:   # logs, stack.json, nats-server.conf, the tape, the store
                places[str(path.relative_to(state))] = path.read_bytes()
        assert "logs/nats-server.log" in places and "tape.duckdb" in places and "stack.json" in places
        leaks = [where for where, text in places.items() for pw in passwords if pw in text]
        assert leaks == []

        assert _mode(state) == 0o700
        assert {p.name: _mode(p) for p in auth.rglob("*") if p.is_file() and p.name != ".lock"} == {
            "operator.json": 0o600, "service.json": 0o600, "users.conf": 0o600, "island-0.json": 0o600}
        assert _mode(state / "nats" / "nats-server.conf") == 0o600
        assert {_mode(d) for d in [auth, *(p for p in auth.rglob("*") if p.is_dir())]} == {0o700}

        operator = json.loads(bus_auth.operator_file(state).read_text())["password"]
        with pytest.raises(ConnectionError) as refused:
            asyncio.run(connect(f"nats://operator:{operator}@127.0.0.1:1", connect_timeout=1))
        assert operator not in str(refused.value) and "127.0.0.1:1" in str(refused.value)
    finally:
        assert main(["--state-dir", str(state), "stack", "down"]) == 0


async def _learner_reaches_the_bus(url: str) -> None:
    """The island's credential works once issued (the server reloaded its users)."""
    bus = await connect(url, name="learner", connect_timeout=20)
    await bus.publish_raw("yeto.evt.r-secret.LearnerProgress.island-0", b"{}", msg_id="r-secret-progress")
    await bus.close()


def test_a_url_with_credentials_is_refused_with_what_to_do(tmp_path, capsys):
    assert main(["--state-dir", str(tmp_path), "--nats-url", "nats://operator:hunter2@127.0.0.1:4222", "status"]) == 2
    said = capsys.readouterr()
    assert "YETO_NATS_CREDS" in said.err + said.out and "hunter2" not in said.err + said.out


def test_a_cloud_islands_credential_ships_as_a_file_never_in_its_envs(tmp_path):
    pytest.importorskip("sky")
    from yeto.services.launcher.backends.base import IslandLaunch
    from yeto.services.launcher.backends.skypilot import CREDS_MOUNT, island_task

    creds = bus_auth.write_secret(tmp_path / "island-1.json", json.dumps({"user": "u", "password": "p4ssw0rd-xyz"}))
    launch = IslandLaunch(run_id="r1", island=1, generation=0, num_islands=2, nats_url="tls://head:4222",
                          spec={"cloud": "aws", "gpu": "A100", "count": 1}, recipe={"train": {"data": "hub/set"}})
    task = island_task(launch, creds)
    assert task.envs["YETO_NATS_CREDS"] == CREDS_MOUNT and task.file_mounts[CREDS_MOUNT] == str(creds)
    assert "p4ssw0rd-xyz" not in json.dumps(task.envs) + task.run + (task.setup or "")


def test_tls_checks_the_servers_name_unless_a_certificate_is_pinned(tmp_path, monkeypatch):
    from yeto.infra.nats.server import NatsServer, TlsConfig
    from yeto.infra.nats.tls import self_signed

    cert, key = self_signed(tmp_path / "tls", ["localhost"])
    assert _mode(key) == 0o600
    server = NatsServer(tmp_path / "nats", tls=TlsConfig(cert_file=cert, key_file=key)).start()
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))   # trusted as a system CA would be: names are checked
        assert asyncio.run(_reaches(f"tls://localhost:{server.port}"))
        with pytest.raises(ConnectionError, match="(?i)hostname|IP address mismatch|certificate"):
            asyncio.run(_reaches(f"tls://127.0.0.1:{server.port}"))
        monkeypatch.setenv("YETO_NATS_CA", str(cert))    # pinned: the certificate itself is the identity
        assert asyncio.run(_reaches(f"tls://127.0.0.1:{server.port}"))
    finally:
        server.stop()


async def _reaches(url: str) -> bool:
    bus = await connect(url, connect_timeout=3)
    await bus.close()
    return True


def test_a_local_island_gets_its_own_credential_by_path_never_on_its_command_line(tmp_path, monkeypatch):
    from yeto.services.launcher.backends.base import IslandLaunch
    from yeto.services.launcher.backends.local import LocalBackend

    bus_auth.prepare(tmp_path)                                            # a stack with authentication
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.service_file(tmp_path)))   # the launcher's own
    show = "import os, sys; print('creds', os.environ['YETO_NATS_CREDS']); print('argv', sys.argv)"
    backend = LocalBackend(tmp_path, rank_argv=lambda launch, recipe, rank, port: [sys.executable, "-c", show, "--x"])
    launch = IslandLaunch(run_id="r1", island=1, generation=0, num_islands=2, nats_url="nats://127.0.0.1:1",
                          spec={"cloud": "local", "gpu": "cpu", "count": 1}, recipe={"train": {}})
    handle = backend.start(launch)
    wait_for(lambda: not backend.status("r1", 1, 0, handle).running, 30, "the stand-in rank to finish")
    said = backend.log_path("r1", 1).read_text()
    mine = bus_auth.learner_file(tmp_path, "r1", "island-1")
    assert f"creds {mine}" in said and _mode(mine) == 0o600
    assert json.loads(mine.read_text())["password"] not in said
    assert "learner-r1-island-1" in bus_auth.users_file(tmp_path).read_text()
