"""The README's quick start run as typed: data check, dry run and its estimate, a real 2-step run, merge, stack down.

tests/cli/docs_lines.py says how a line runs and how it is shortened. Between the run and the merge: its status, a tape
query and its stop. docs/CONFIG.md's and docs/CLI.md's lines are test_cli_docs_config_and_cli.py's (a file of their
own, so the two test workers can take one each)."""
from __future__ import annotations

import pytest

from docs_lines import REPO, doc_commands, run_docs

DOCS = (("README.md", "## Quick start"),)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_the_quick_start_has_the_commands_this_test_runs():
    found = doc_commands(*DOCS[0])
    assert any(c.startswith("yeto launch --gpu local:") and "--wait" in c for c, _ in found)
    assert any(c.startswith("yeto merge ") for c, _ in found)


def test_every_command_of_the_quick_start_runs_as_documented(tmp_path):
    ran = run_docs(DOCS, tmp_path)
    assert not ran.failures, "\n\n".join(ran.failures)
    assert ran.estimates == [["7 min 25 s"]] and "estimates 7 min 25 s" in (REPO / "README.md").read_text()
    assert ran.num_ran >= 6 and (ran.work / "merged" / "config.json").exists()   # the quick start's merge wrote the model
