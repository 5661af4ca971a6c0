"""A credential the bus refuses (tampered, revoked, of an ended run) stops a learner with one line naming the
credential, within seconds and without its secret, instead of retrying its connection for an hour; a bus that is only
away is still waited for. Against a real nats-server with the stack's users file."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect
from yeto.infra.bus.nats_bus import REFUSED_S, CredentialRefused, NatsBus
from yeto.infra.nats.server import NatsServer, free_port
from yeto.learners.bus_client import REFUSED_EXIT
from yeto.learners.torch.tiny import write_chat_jsonl, write_model_dir

FORGED = "not-the-password-f0rged"


@pytest.fixture
def island(tmp_path):
    """A real nats-server with the stack's users file, and island-0's genuine credential of run r-ref."""
    state = tmp_path / "state"
    srv = NatsServer(state / "nats", users_file=bus_auth.prepare(state, (("r-ref", "island-0"),))).start()
    try:
        yield srv, state, json.loads(bus_auth.learner_file(state, "r-ref", "island-0").read_text())
    finally:
        srv.stop()


def _creds(tmp_path, credential: dict, monkeypatch=None) -> str:
    path = str(bus_auth.write_secret(tmp_path / "creds.json", json.dumps(credential)))
    if monkeypatch is not None:
        monkeypatch.setenv(bus_auth.CREDS_ENV, path)
    return path


@pytest.mark.timeout(60)
def test_a_refused_credential_fails_the_connection_as_refused_long_before_its_deadline(island, tmp_path, monkeypatch):
    srv, _, genuine = island
    _creds(tmp_path, {**genuine, "password": FORGED}, monkeypatch)
    with pytest.raises(CredentialRefused) as refused:       # the deadline (3600 s) would fail the test's own timeout
        asyncio.run(connect(srv.url, name="forged", connect_timeout=3600))
    assert "refused this process's credential (authorization violation)" in str(refused.value)
    assert FORGED not in str(refused.value)


@pytest.mark.timeout(60)
def test_an_unreachable_bus_is_not_a_refusal(island, tmp_path, monkeypatch):
    _, _, genuine = island
    _creds(tmp_path, genuine, monkeypatch)
    with pytest.raises(ConnectionError) as away:
        asyncio.run(connect(f"nats://127.0.0.1:{free_port()}", name="away", connect_timeout=REFUSED_S + 2))
    assert not isinstance(away.value, CredentialRefused) and "cannot reach NATS" in str(away.value)


@pytest.mark.timeout(60)
def test_a_credential_revoked_while_connected_is_told_as_refused(island, tmp_path, monkeypatch):
    """The users file loses the island (as revocation would do it) and the server reloads: the server drops the
    connection, and its reconnections meet only refusals."""
    srv, state, genuine = island
    _creds(tmp_path, genuine, monkeypatch)

    async def revoked() -> bool:
        bus = await connect(srv.url, name="revoked", connect_timeout=30)
        assert isinstance(bus, NatsBus) and not bus.refused.is_set()
        bus_auth.learner_file(state, "r-ref", "island-0").unlink()
        bus_auth.prepare(state)            # the users file rendered again, without island-0
        os.kill(srv.pid, signal.SIGHUP)
        await asyncio.wait_for(bus.refused.wait(), 30)
        await bus.close()
        return True
    assert asyncio.run(revoked())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_learner_with_a_wrong_password_exits_with_one_line_naming_the_credential(island, tmp_path):
    srv, _, genuine = island
    recipe = {"model": str(write_model_dir(tmp_path / "model")), "data": str(write_chat_jsonl(tmp_path / "c.jsonl",
                                                                                               num_rows=200)),
              "seq_len": 32, "micro_batch": 2, "max_steps": 10**9, "lr": 1e-3, "tuning": "full"}   # never ends by itself
    env = {**os.environ, "OMP_NUM_THREADS": "1", bus_auth.CREDS_ENV: _creds(tmp_path, {**genuine, "password": FORGED})}
    done = subprocess.run([sys.executable, "-m", "yeto.learners.torch", "--run-id", "r-ref", "--learner", "island-0",
                           "--nats-url", srv.url, "--recipe", json.dumps(recipe)],
                          capture_output=True, text=True, timeout=200, env=env)
    assert done.returncode == REFUSED_EXIT, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("learner stopped: the bus at ") and "refused this process's credential" in last, last
    assert FORGED not in done.stdout + done.stderr
    assert done.stderr.lower().count("authorization violation") <= 3, done.stderr[-3000:]   # told, not retried aloud
