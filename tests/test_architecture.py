"""The architecture of DESIGN.md, checked: the layering, no import cycles, pure cores, the package list, the public API, the CLI.

The checks live in import_graph.py, layering.py and pure_cores.py as functions of a tree's root; each one is also run on a
small bad tree here, so a check that could never fail would fail its own test.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import tomllib

from import_graph import FOLDERS, cycles, imports
from layering import layer_violations
from pure_cores import io_violations, pure_cores

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("planner", "launcher", "syncer", "finalizer")


def test_each_layer_imports_only_what_the_layering_allows():
    # schemas <- infra <- services/<x> (own package only) ; learners (schemas, learners; the bus via the transport);
    # the CLI reaches services and learners only through their api faces.
    assert layer_violations(ROOT) == []


def _schemas_reaching_out(root: Path) -> list[str]:
    return [str(i) for i in imports(root) if i.source.startswith("yeto.schemas")
            and i.target.split(".")[0] in {"nats", "duckdb", "subprocess", "socket", "requests"}]


def test_no_schemas_module_imports_the_bus_the_tape_processes_or_sockets():
    assert _schemas_reaching_out(ROOT) == []


def test_services_never_import_each_other():
    for i in imports(ROOT):
        if i.source.startswith("yeto.services."):
            own = ".".join(i.source.split(".")[:3])
            other = [s for s in SERVICES if i.target.startswith(f"yeto.services.{s}") and f"yeto.services.{s}" != own]
            assert not other, f"{i}: another service"


def test_learners_reach_the_bus_only_through_the_transport():
    for i in imports(ROOT):
        if i.source.startswith("yeto.learners.") and i.target.split(".")[0] == "nats":
            assert i.source.startswith(("yeto.learners.bus_client", "yeto.learners.transport")), f"{i}: use the transport"


def test_no_import_cycles_among_yeto_modules():
    assert cycles(ROOT) == []


def test_pure_cores_read_no_clock_file_environment_or_network():
    cores = pure_cores(ROOT)
    assert Path("services/finalizer/logic.py") in cores and Path("schemas/events.py") in cores
    assert io_violations(ROOT, cores) == []


def test_every_package_folder_is_listed_in_pyproject():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {folder: name for name, folder in conf["package-dir"].items()} == FOLDERS   # what the import graph maps
    listed = set(conf["packages"])
    found = set()
    for folder, dotted in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((dotted, *rel)))
    assert found - listed == set(), f"add these packages to pyproject.toml: {sorted(found - listed)}"
    assert listed - found == set(), f"pyproject.toml lists missing packages: {sorted(listed - found)}"


def test_schemas_public_api_is_exactly_what_is_meant():
    import yeto.schemas

    assert sorted(yeto.schemas.__all__) == sorted(
        ["Command", "Event", "Message", "SchemaError", "derive_id", "new_id", "parse", "registry", "to_bytes"])


@pytest.mark.parametrize("command", ["stack", "launch", "status", "logs", "sql", "tape", "data", "shape", "down", "chaos"])
def test_cli_has_every_documented_command(command, capsys):
    from yeto.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert command in sub.choices, f"`yeto {command}` is documented in the README but missing"


# The checks can fail: each bad tree below breaks one rule once, and the check names that line.
BAD_IMPORTS = {
    "services/finalizer/artifact.py": ("from yeto.learners.torch.model import resolve", "services.finalizer may not"),
    "services/planner/plan.py": ("from yeto.cli.shape import render", "services.planner may not"),
    "services/planner/wiring.py": ("from ..launcher import state", "imports yeto.services.launcher "),
    "learners/torch/model.py": ("def f():\n    from yeto.services.planner.api import GPUS", "learners may not"),
    "learners/torch/build.py": ("import yeto.cli.main", "learners may not"),
    "learners/diloco_sync.py": ("from yeto.infra import bus", "learners may not"),
    "yeto/cli/chaos.py": ("from yeto.services.launcher.backends.local import LocalBackend", "cli may not"),
    "yeto/cli/merge.py": ("from yeto.learners.torch.model import load_model", "cli may not"),
    "schemas/events.py": ("from yeto.infra.bus import Bus", "schemas may not"),
    "infra/runner.py": ("from yeto.services.syncer import core", "infra may not"),
}
GOOD_IMPORTS = {
    "yeto/cli/shape.py": "from yeto.services.planner.api import shape_fleet\nfrom yeto.learners.data import FORMATS",
    "services/syncer/core.py": "from . import merge\nfrom yeto.infra.bus import Bus\nfrom yeto.schemas import parse",
    "learners/transport/outbox.py": "from yeto.infra.bus import Bus",
    "learners/torch/hook.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from yeto.services.syncer import core",
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) + "\n")
    return root


@pytest.mark.parametrize("rel", sorted(BAD_IMPORTS))
def test_the_layering_check_catches_a_forbidden_import(tmp_path, rel):
    code, expected = BAD_IMPORTS[rel]
    found = layer_violations(_tree(tmp_path, {**GOOD_IMPORTS, rel: code}))
    assert len(found) == 1 and rel in found[0] and expected in found[0], found


def test_the_layering_check_passes_faces_own_package_imports_and_type_checking_blocks(tmp_path):
    assert layer_violations(_tree(tmp_path, GOOD_IMPORTS)) == []


def test_the_cycle_check_catches_a_loop_through_a_lazy_import_but_not_a_type_checking_one(tmp_path):
    _tree(tmp_path, {"yeto/cli/runs.py": "from yeto.cli.tape import load_run",
                     "yeto/cli/tape.py": "def f():\n    from yeto.cli import runs",
                     "yeto/cli/sql.py": "from yeto.cli.tape import f",
                     "services/syncer/core.py": "from yeto.services.syncer import resume",
                     "services/syncer/resume.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                  "    from yeto.services.syncer.core import SyncerCore"})
    assert cycles(tmp_path) == [["yeto.cli.runs", "yeto.cli.tape"]]


def test_the_schemas_check_catches_a_bus_import_even_in_base_py(tmp_path):
    _tree(tmp_path, {"schemas/base.py": "import uuid\nimport nats", "schemas/events.py": "from yeto.schemas import base"})
    assert [f.split(" ", 1)[1] for f in _schemas_reaching_out(tmp_path)] == ["imports nats"]


@pytest.mark.parametrize("code", ["import time\nx = time.time()", "from time import monotonic", "open('f')",
                                  "from pathlib import Path\nPath('f').read_text()", "import os\nos.environ['A']",
                                  "from os import getenv", "import subprocess", "import nats", "from duckdb import connect",
                                  "from datetime import datetime\nx = datetime.now()", "import socket", "import uuid"])
def test_the_purity_check_catches_a_clock_file_env_or_network_use(tmp_path, code):
    _tree(tmp_path, {"services/finalizer/logic.py": "from dataclasses import replace", "services/launcher/state.py": code,
                     "schemas/run_view.py": "from datetime import datetime\nx = datetime.fromisoformat('2026-01-01')"})
    found = io_violations(tmp_path, pure_cores(tmp_path))
    assert len(found) == 1 and found[0].startswith("services/launcher/state.py:"), found
