"""The read-side commands against a stack's bus that cannot be reached say so (issue 41): `yeto tape show RUN` used to
answer "no run on the tape", a guess, since the tape was never asked. The CLI's run check now lets the bus's error
through: one line, what was tried and what to check."""
from __future__ import annotations

import pytest

from yeto.cli.main import main
from yeto.infra.nats.server import free_port

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("argv", [["tape", "show", "r1"], ["tape", "show"], ["tape", "replay", "r1"],
                                  ["sql", "select 1"]])
def test_an_unreachable_bus_is_said_to_be_unreachable_not_an_unknown_run(tmp_path, capsys, argv):
    url = f"nats://127.0.0.1:{free_port()}"
    assert main(["--state-dir", str(tmp_path), "--nats-url", url, *argv]) == 1      # the bus, not the input
    err = capsys.readouterr().err
    assert err.startswith(f"yeto: error: cannot reach NATS at {url}") and err.count("\n") == 1, err
    assert "no run" not in err
