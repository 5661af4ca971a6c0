"""A join token never on a command line (issue 41): `yeto join --token T` put the slot's credential in every user's
process list. It is refused with a sentence saying where the token goes instead ($YETO_JOIN_TOKEN, --token-file FILE,
--token-file - on stdin), and each of those is read (a token for another run is refused by its run, so no learner
starts). A tampered token stops `yeto join` with one line before a learner starts (it used to loop on permission
violations): a token naming another learner than its credential's, or a credential the bus refuses."""
from __future__ import annotations

import io
import json
import os

import pytest

from yeto.cli.join import check_credential
from yeto.cli.main import main
from yeto.infra.bus import auth as bus_auth
from yeto.infra.nats.server import NatsServer
from yeto.services.launcher.api import JoinToken

TOKEN = JoinToken(url="nats://127.0.0.1:1", credential={"user": "u", "password": "p"}, run_id="r-other",
                  learner="island-1", slot=1, generation=0, num_islands=2, start_step=0, recipe={}).encode()


def test_a_token_on_the_command_line_is_refused_saying_where_it_goes(capsys, monkeypatch):
    monkeypatch.delenv("YETO_JOIN_TOKEN", raising=False)
    assert main(["join", "r-mine", "--token", TOKEN]) == 2
    err = capsys.readouterr().err
    assert "--token puts the join token" in err and "$YETO_JOIN_TOKEN" in err and "--token-file -" in err, err
    assert TOKEN not in err


@pytest.mark.parametrize("how", ["env", "file", "stdin"])
def test_the_token_is_read_from_the_environment_a_file_or_stdin(capsys, monkeypatch, tmp_path, how):
    monkeypatch.delenv("YETO_JOIN_TOKEN", raising=False)
    argv = ["join", "r-mine"]
    if how == "env":
        monkeypatch.setenv("YETO_JOIN_TOKEN", TOKEN)
    elif how == "file":
        (tmp_path / "token").write_text(TOKEN + "\n")
        argv += ["--token-file", str(tmp_path / "token")]
    else:
        monkeypatch.setattr("sys.stdin", io.StringIO(TOKEN + "\n"))
        argv += ["--token-file", "-"]
    assert main(argv) == 2
    assert "this token is for run r-other, not r-mine" in capsys.readouterr().err


def test_a_missing_token_file_says_so(capsys, tmp_path):
    assert main(["join", "r-mine", "--token-file", str(tmp_path / "nope")]) == 2
    assert f"--token-file {tmp_path / 'nope'}: cannot read it" in capsys.readouterr().err


@pytest.fixture(scope="module")
def slots(tmp_path_factory):
    """A real nats-server with the stack's users file, and the credentials of two slots of run r-join."""
    state = tmp_path_factory.mktemp("state")
    srv = NatsServer(state / "nats", users_file=bus_auth.prepare(state, (("r-join", "island-1"), ("r-join", "island-2"))))
    srv.start()
    creds = {who: json.loads(bus_auth.learner_file(state, "r-join", who).read_text()) for who in ("island-1", "island-2")}
    yield srv.url, creds
    srv.stop()


def _token(url: str, credential: dict, learner: str) -> JoinToken:
    return JoinToken(url=url, credential=credential, run_id="r-join", learner=learner, slot=int(learner[-1]),
                     generation=0, num_islands=3, start_step=0, recipe={})


def _join(token: JoinToken, monkeypatch, capsys) -> str:
    monkeypatch.setenv("YETO_JOIN_TOKEN", token.encode())
    assert main(["join", "r-join"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "yeto join-token r-join --slot" in err, err
    return err


def test_a_token_altered_to_name_another_learner_stops_join_before_a_learner_starts(slots, monkeypatch, capsys):
    url, creds = slots
    err = _join(_token(url, creds["island-2"], "island-1"), monkeypatch, capsys)   # island-2's credential as island-1
    assert "this join token was altered: its credential is not the one issued to island-1 of r-join" in err


def test_a_credential_the_bus_refuses_stops_join_in_one_line(slots, monkeypatch, capsys):
    url, creds = slots
    forged = {**creds["island-1"], "password": "not-the-password"}
    err = _join(_token(url, forged, "island-1"), monkeypatch, capsys)
    assert "refused this join token's credential (authorization violation)" in err and "not-the-password" not in err


def test_the_genuine_token_passes_the_check(slots, tmp_path, monkeypatch):
    url, creds = slots
    monkeypatch.delenv(bus_auth.CREDS_ENV, raising=False)
    env = {bus_auth.CREDS_ENV: str(bus_auth.write_secret(tmp_path / "creds.json", json.dumps(creds["island-1"])))}
    check_credential(_token(url, creds["island-1"], "island-1"), url, env)
    assert bus_auth.CREDS_ENV not in os.environ, "the probe's credential is not left in the CLI's environment"
