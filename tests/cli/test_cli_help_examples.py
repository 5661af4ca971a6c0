"""Every example in a `--help` text (`yeto ...` lines of descriptions and epilogs) runs and exits 0 against a real tape
holding a run named r-demo; the few that need a model or never end are listed with why."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tape"))
from tape_events import scripted_run
from yeto.cli.main import build_parser, main
from yeto.infra.run_paths import run_path
from yeto.infra.stack import StackPaths
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes

NOT_RUN = {   # the example's start -> why it is not run here (each is run by the test named)
    "yeto launch": "needs a model and trains (tests/e2e)",
    "yeto dashboard": "serves until stopped (tests/cli/test_cli_dashboard.py)",
}


def help_examples() -> list[str]:
    found: list[str] = []

    def walk(parser: argparse.ArgumentParser) -> None:
        for text in (parser.description or "", parser.epilog or ""):
            found.extend(line.strip() for line in text.splitlines() if line.strip().startswith("yeto "))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in dict.fromkeys(action.choices.values()):
                    walk(child)
    walk(build_parser())
    return list(dict.fromkeys(found))


EXAMPLES = help_examples()


def test_the_help_texts_have_examples():
    assert len(EXAMPLES) >= 10 and any(e.startswith("yeto sql") for e in EXAMPLES)


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """A tape with the scripted run r-demo and a local log file of it; no stack running."""
    home = tmp_path_factory.mktemp("examples")
    events = scripted_run("r-demo")
    store = TapeStore(StackPaths(home).db)
    store.append(list(range(1, len(events) + 1)), [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    store.close()
    logs = run_path(home, "r-demo", "logs")
    logs.mkdir(parents=True)
    (logs / "island-0.log").write_text("step 10 loss 2.5\n")
    (logs / "island-1.log").write_text("step 20 loss 2.0\n")
    return home


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_help_example_runs(example, state, monkeypatch, capsys):
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    if why := next((w for start, w in NOT_RUN.items() if example.startswith(start)), None):
        pytest.skip(why)
    argv = shlex.split(example, comments=True)[1:]
    if "-f" in argv or "--follow" in argv:
        pytest.skip("follows until the run ends (tests/cli/test_cli_logs.py)")
    assert main(["--state-dir", str(state), *argv]) == 0, capsys.readouterr().err
