"""What a cloud island's learner does with the files its task mounts: `~` paths in $YETO_NATS_CREDS / $YETO_NATS_CA
reach a real TLS nats-server with the island's own credential, and $YETO_ENV_FILE's secrets land in its environment
(a bad file stops it with a message that names the file, never what is inside)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus.nats_bus import NatsBus
from yeto.learners.shell import load_env_file
from yeto.learners.torch.__main__ import main
from yeto.services.launcher.backends.sky_tasks import CA_MOUNT, CREDS_MOUNT, ENV_MOUNT

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An island's home: its task's file mounts land under ~/.yeto/island/."""
    home = tmp_path / "island-home"
    (home / ".yeto" / "island").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for name in (bus_auth.CREDS_ENV, "YETO_NATS_CA", "YETO_ENV_FILE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return home


def mounted(home, target: str):
    return home / target.removeprefix("~/")


def test_a_learner_reaches_the_head_with_the_mounted_credential_and_ca_named_by_tilde_paths(tmp_path, home, monkeypatch):
    from yeto.infra.nats.server import NatsServer, TlsConfig
    from yeto.infra.nats.tls import self_signed

    head = tmp_path / "head"
    users = bus_auth.prepare(head, (("r1", "island-0"),))
    cert, key = self_signed(head / "tls", ["yeto-head"])
    server = NatsServer(tmp_path / "nats", tls=TlsConfig(cert_file=cert, key_file=key), users_file=users).start()
    try:
        shutil.copy(bus_auth.learner_file(head, "r1", "island-0"), mounted(home, CREDS_MOUNT))
        shutil.copy(cert, mounted(home, CA_MOUNT))
        monkeypatch.setenv(bus_auth.CREDS_ENV, CREDS_MOUNT)
        monkeypatch.setenv("YETO_NATS_CA", CA_MOUNT)

        async def reach() -> bool:       # the server admits only its users: connected is the credential read
            bus = await NatsBus.connect(f"tls://127.0.0.1:{server.port}", connect_timeout=10)
            connected = bus.nc.is_connected
            await bus.close()
            return connected
        assert asyncio.run(reach())
    finally:
        server.stop()


def test_the_env_file_loads_the_islands_secrets_into_its_environment(home, monkeypatch):
    bus_auth.write_secret(mounted(home, ENV_MOUNT), json.dumps({"HF_TOKEN": "hf_abc", "WANDB_API_KEY": "w-123"}))
    monkeypatch.setenv("YETO_ENV_FILE", ENV_MOUNT)
    monkeypatch.setenv("WANDB_API_KEY", "")      # restored by monkeypatch after the test
    load_env_file()
    assert os.environ["HF_TOKEN"] == "hf_abc" and os.environ["WANDB_API_KEY"] == "w-123"
    monkeypatch.delenv("HF_TOKEN")


def test_a_bad_env_file_stops_the_learner_naming_the_file_not_its_contents(home, monkeypatch, capsys, caplog):
    bus_auth.write_secret(mounted(home, ENV_MOUNT), '["hf_leaked-value"]')
    monkeypatch.setenv("YETO_ENV_FILE", ENV_MOUNT)
    assert main(["--run-id", "r1", "--learner", "island-0", "--recipe", "{}", "--no-sync"]) == 2
    said = capsys.readouterr()
    shown = said.out + said.err + caplog.text      # the learner's error goes to stderr through logging
    assert f"$YETO_ENV_FILE={ENV_MOUNT}" in shown and "hf_leaked-value" not in shown
