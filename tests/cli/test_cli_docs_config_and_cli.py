"""docs/CONFIG.md's and docs/CLI.md's fenced bash lines run as typed, each exiting with the status the doc gives.

tests/cli/docs_lines.py says how a line runs and how it is shortened (each CONFIG.md `--wait` is a `--dry-run`): the
config files' launches, the version, status in a fresh state directory, and the two bad run ids refused with exit 2."""
from __future__ import annotations

import pytest

from docs_lines import doc_commands, run_docs

DOCS = (("docs/CONFIG.md", None), ("docs/CLI.md", None))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_the_config_and_cli_docs_have_the_commands_this_test_runs():
    config, cli = (doc_commands(path, section) for path, section in DOCS)
    assert any("-c examples/configs/" in c for c, _ in config)
    assert [s for _, s in cli].count(2) == 2


def test_every_command_of_the_config_and_cli_docs_runs_as_documented(tmp_path):
    ran = run_docs(DOCS, tmp_path)
    assert not ran.failures, "\n\n".join(ran.failures)
    assert ran.num_ran >= 6
