"""Shell completion of run ids: the real entry point with argcomplete's variables, ids from the state dir alone."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)


def complete(tmp_path, line: str) -> list[str]:
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "ARGCOMPLETE_USE_TEMPFILES": "1", "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "YETO_NATS_URL": ""}
    subprocess.run([sys.executable, "-c", "from yeto.cli.main import main; main()"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return sorted(w.strip() for w in out.read_text().split("\n") if w.strip())


def test_run_ids_complete_from_the_state_dir_without_a_stack(tmp_path):
    state = tmp_path / "state"
    for folder in ("runs/r-local-one", "runs/r-local-two", "auth/learners/r-local-two", "heads/r-cloud-one",
                   "runs/Not_A_Run"):
        (state / folder).mkdir(parents=True)
    flag = f"--state-dir {state}"
    assert complete(tmp_path, f"yeto status {flag} r-") == ["r-cloud-one", "r-local-one", "r-local-two"]
    assert complete(tmp_path, f"yeto {flag} logs r-local-t") == ["r-local-two"]
    assert complete(tmp_path, f"yeto down {flag} r-c") == ["r-cloud-one"]
    assert complete(tmp_path, f"yeto sql {flag} --run r-local-o") == ["r-local-one"]
    assert complete(tmp_path, f"yeto tape replay {flag} r-nothing") == []


def test_run_ids_complete_from_a_stopped_stack_s_tape(tmp_path):
    import duckdb

    from yeto.infra.tape.store import SCHEMA

    state = tmp_path / "state"
    state.mkdir()
    with duckdb.connect(str(state / "tape.duckdb")) as db:
        db.execute(SCHEMA)
        db.execute("INSERT INTO events (seq, run_id, type) VALUES (1, 'r-on-tape', 'RunLaunched')")
    assert complete(tmp_path, f"yeto status --state-dir {state} r-") == ["r-on-tape"]
