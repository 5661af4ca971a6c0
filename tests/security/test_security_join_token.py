"""A join token never on a command line (issue 41): `yeto join --token T` put the slot's credential in every user's
process list. It is refused with a sentence saying where the token goes instead ($YETO_JOIN_TOKEN, --token-file FILE,
--token-file - on stdin), and each of those is read (a token for another run is refused by its run, so no learner
starts)."""
from __future__ import annotations

import io

import pytest

from yeto.cli.main import main
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
