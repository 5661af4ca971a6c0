"""The architecture of DESIGN.md, checked: the layering, no import cycles, pure cores, the package list, the public API, the CLI.

The checks live in import_graph.py, layering.py, pure_cores.py and here, as functions of a tree's root; each one is also
run on a small bad tree below (its twin), so a check that could never fail would fail its own test.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from import_graph import cycles, imports
from layering import (
    BENCH_FACES,
    BENCH_ROOMS,
    FACES,
    SHARED_EDGES,
    TRANSPORT,
    bench_violations,
    layer_violations,
    missing_names,
    path_edits,
)
from pure_cores import io_violations, missing_exemptions, pure_cores
from yeto.infra.package_dir import listed_packages, package_dir

ROOT = Path(__file__).resolve().parents[1]


def test_each_layer_imports_only_what_the_layering_allows():
    # schemas <- infra <- services/<x> (own package only) ; learners (schemas, learners; the bus via the transport);
    # the CLI reaches services and learners only through their api faces.
    assert layer_violations(ROOT) == []


def _schemas_reaching_out(root: Path) -> list[str]:
    return [str(i) for i in imports(root) if i.source.startswith("yeto.schemas")
            and i.target.split(".")[0] in {"nats", "duckdb", "subprocess", "socket", "requests"}]


def test_no_schemas_module_imports_the_bus_the_tape_processes_or_sockets():
    assert _schemas_reaching_out(ROOT) == []


def test_benchmarks_reach_yeto_only_through_its_faces_and_edit_no_sys_path():
    assert bench_violations(ROOT) == []
    assert path_edits(ROOT) == []


def test_every_benchmark_face_exports_what_it_lists():
    # the learner faces load their heavy names on first use: each listed name must resolve
    import importlib

    for face in ("yeto.learners.api", "yeto.learners.torch.api", "yeto.learners.diffusion.api", "yeto.services.syncer.api"):
        module = importlib.import_module(face)
        assert [name for name in module.__all__ if getattr(module, name, None) is None] == [], face


def test_the_layering_names_only_modules_that_exist():
    assert missing_names(ROOT) == []


def _services_importing_each_other(root: Path) -> list[str]:
    found = []
    for i in imports(root):
        source, target = i.source.split("."), i.target.split(".")
        if source[:2] == target[:2] == ["yeto", "services"] and len(source) > 2 and len(target) > 2 and source[2] != target[2]:
            found.append(f"{i}: another service")
    return found


def test_services_never_import_each_other():
    assert _services_importing_each_other(ROOT) == []


def _learners_reaching_the_bus(root: Path) -> list[str]:
    return [f"{i}: use the transport" for i in imports(root) if i.source.startswith("yeto.learners.")
            and i.target.split(".")[0] == "nats" and not i.source.startswith(TRANSPORT)]


def test_learners_reach_the_bus_only_through_the_transport():
    assert _learners_reaching_the_bus(ROOT) == []


def test_no_import_cycles_among_yeto_modules():
    assert cycles(ROOT) == []


def test_pure_cores_read_no_clock_file_environment_or_network_and_each_listed_one_exists():
    cores = pure_cores(ROOT)
    assert Path("services/finalizer/logic.py") in cores and Path("schemas/events.py") in cores
    assert io_violations(ROOT, cores) == []
    assert missing_exemptions(ROOT) == []


def _package_list_mismatches(root: Path) -> list[str]:
    """pyproject.toml's packages against the tree: each package folder (an __init__.py under a package-dir folder)
    must be listed, each listed package must have its folder, each package-dir folder must exist."""
    mapping = package_dir(root)
    out = [f"pyproject.toml maps {name} to {folder}/, which does not exist" for name, folder in sorted(mapping.items())
           if not (root / folder).is_dir()]
    found = {".".join((name, *init.parent.relative_to(root / folder).parts))
             for name, folder in mapping.items() for init in (root / folder).rglob("__init__.py")}
    listed = listed_packages(root)
    out += [f"add {name} to pyproject.toml's packages" for name in sorted(found - listed)]
    return out + [f"pyproject.toml lists {name}, which has no folder" for name in sorted(listed - found)]


def test_every_package_folder_is_listed_in_pyproject():
    assert _package_list_mismatches(ROOT) == []


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
    # Every branch is read: a type-only import, an import that runs only when not type checking, a fallback, an else.
    "services/finalizer/state.py": ("import typing\nif typing.TYPE_CHECKING:\n    from yeto.services.planner.api import GPUS",
                                    "services.finalizer may not"),
    "services/launcher/logic.py": ("import typing\nif not typing.TYPE_CHECKING:\n    from yeto.services.syncer import core",
                                   "services.launcher may not"),
    "services/syncer/merge.py": ("try:\n    import cupy\nexcept ImportError:\n    from yeto.services.planner import gpus",
                                 "services.syncer may not"),
    "infra/settings.py": ("import sys\nif sys.platform == 'x':\n    pass\nelse:\n    import yeto.services.launcher.api",
                          "infra may not"),
    "learners/mlx/loop.py": ("import importlib\nbus = importlib.import_module('yeto.infra.bus')", "learners may not"),
    "learners/torch/hook.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from yeto.services.syncer import core",
                               "learners may not"),
    "services/planner/plan.py": ("from yeto.cli.shape import render", "services.planner may not"),
    "services/planner/wiring.py": ("from ..launcher import state", "imports yeto.services.launcher "),
    "learners/torch/model.py": ("def f():\n    from yeto.services.planner.api import GPUS", "learners may not"),
    "learners/torch/build.py": ("import yeto.cli.main", "learners may not"),
    "learners/diloco_sync.py": ("from yeto.infra import bus", "learners may not"),
    "yeto/cli/chaos.py": ("from yeto.services.launcher.backends.local import LocalBackend", "cli may not"),
    "yeto/cli/merge.py": ("from yeto.learners.torch.model import load_model", "cli may not"),
    "schemas/events.py": ("from yeto.infra.bus import Bus", "schemas may not"),
    "infra/runner/__init__.py": ("from yeto.services.syncer import core", "infra may not"),
}
GOOD_IMPORTS = {
    "yeto/cli/shape.py": "from yeto.services.planner.api import shape_fleet\nfrom yeto.learners.data import FORMATS",
    "services/syncer/core.py": "from . import merge\nfrom yeto.infra.bus import Bus\nfrom yeto.schemas import parse",
    "learners/transport/outbox.py": "from yeto.infra.bus import Bus",
    "learners/torch/tuning.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from yeto.learners import layout",
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


def test_the_layering_check_passes_faces_own_package_imports_and_allowed_type_checking_blocks(tmp_path):
    assert layer_violations(_tree(tmp_path, GOOD_IMPORTS)) == []


def _module_file(name: str) -> str:
    """Where a tree keeps module `name` (yeto.learners.transport -> learners/transport/__init__.py)."""
    folder = {dotted: folder for dotted, folder in package_dir(ROOT).items()}
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        if ".".join(parts[:cut]) in folder:
            return "/".join((folder[".".join(parts[:cut])], *parts[cut:])) + ".py"
    raise AssertionError(f"{name} is under no package-dir folder")


def test_the_names_check_catches_a_face_that_no_longer_exists(tmp_path):
    named = dict.fromkeys((*FACES, *TRANSPORT, *SHARED_EDGES, *BENCH_FACES, *BENCH_ROOMS))
    gone = "yeto.learners.diffusion.api"
    files = {_module_file(n): "" for n in named if n != gone}
    files["learners/transport/__init__.py"] = files.pop("learners/transport.py")   # a package: its __init__
    assert missing_names(_tree(tmp_path, files)) == [f"{gone}: named in layering.py, but there is no such module"]


BENCH_GOOD = {
    "benchmarks/merge.py": "from yeto.services.syncer.api import merge_round\nfrom yeto.schemas import codecs\n"
                           "import lib_task\nfrom yeto.cli.main import build_parser\n"
                           "from yeto.infra.tape.writer import TapeWriter",
    "benchmarks/lib_task.py": "def f():\n    from yeto.learners.torch.api import tiny\n"
                              "    from yeto.learners.api import DilocoSync",
}


@pytest.mark.parametrize("code", ["from yeto.services.syncer import core", "from yeto.learners.torch.loop import train",
                                  "import typing\nif typing.TYPE_CHECKING:\n    from yeto.learners.layout import plan_layout",
                                  "def f():\n    from yeto.infra.runner import run", "import yeto.services.launcher.logic"])
def test_the_benchmarks_check_catches_an_import_past_the_faces(tmp_path, code):
    found = bench_violations(_tree(tmp_path, {**BENCH_GOOD, "benchmarks/round.py": code}))
    assert len(found) == 1 and found[0].startswith("benchmarks/round.py:"), found


def test_the_benchmarks_check_passes_faces_schemas_the_cli_and_the_listed_infra_rooms(tmp_path):
    assert bench_violations(_tree(tmp_path, BENCH_GOOD)) == []


@pytest.mark.parametrize("code", ["import sys\nsys.path.insert(0, 'tests')", "import sys\nsys.path += ['x']",
                                  "import subprocess\nsubprocess.run(['python', '-c', 'import sys; sys.path.append(\"t\")'])"])
def test_the_sys_path_check_catches_an_edit_or_a_python_c_string_doing_one(tmp_path, code):
    found = path_edits(_tree(tmp_path, {"benchmarks/ok.py": '"""Run as a script: its folder is first on sys.path."""',
                                        "benchmarks/bad.py": code}))
    assert len(found) == 1 and found[0].startswith("benchmarks/bad.py:"), found


def _long_benchmark_functions(root: Path, limit: int = 60) -> list[str]:
    """Functions in benchmarks/ longer than `limit` lines: a long main is split into named steps."""
    import ast

    return [f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} is {node.end_lineno - node.lineno + 1} lines"
            for path in sorted((root / "benchmarks").glob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_no_benchmark_function_runs_past_sixty_lines():
    assert _long_benchmark_functions(ROOT) == []


def test_the_length_check_catches_a_long_function_but_not_a_short_one(tmp_path):
    def body(lines: int) -> str:
        return "def main():\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 1))
    _tree(tmp_path, {"benchmarks/long.py": body(61), "benchmarks/short.py": body(60)})
    assert _long_benchmark_functions(tmp_path) == ["benchmarks/long.py:1 main is 61 lines"]


def test_the_services_check_catches_a_lazy_import_of_another_service_but_not_its_own(tmp_path):
    _tree(tmp_path, {"services/planner/plan.py": "from yeto.services.planner import gpus\nimport yeto.services",
                     "services/planner/wiring.py": "def f():\n    from yeto.services.launcher.state import LauncherState",
                     "services/launcher/state.py": "from yeto.schemas import events"})
    found = _services_importing_each_other(tmp_path)
    assert len(found) == 1 and found[0].startswith("services/planner/wiring.py:2 imports yeto.services.launcher.state"), found


def test_the_bus_check_catches_nats_outside_the_transport_in_any_branch(tmp_path):
    _tree(tmp_path, {"learners/transport/outbox.py": "import nats", "learners/bus_client.py": "from nats.js import api",
                     "learners/torch/loop.py": "from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n    import nats"})
    found = _learners_reaching_the_bus(tmp_path)
    assert len(found) == 1 and found[0].startswith("learners/torch/loop.py:3 imports nats"), found


PYPROJECT = """
[tool.setuptools]
packages = ["yeto", "yeto.schemas", "yeto.services", "yeto.services.gone"]
package-dir = { "yeto" = "yeto", "yeto.schemas" = "schemas", "yeto.services" = "services", "yeto.infra" = "infra" }
"""


def test_the_package_list_check_catches_an_unlisted_a_vanished_and_an_unmapped_folder(tmp_path):
    _tree(tmp_path, {"pyproject.toml": PYPROJECT, "yeto/__init__.py": "", "schemas/__init__.py": "",
                     "services/__init__.py": "", "services/syncer/__init__.py": ""})
    assert _package_list_mismatches(tmp_path) == [
        "pyproject.toml maps yeto.infra to infra/, which does not exist",
        "add yeto.services.syncer to pyproject.toml's packages",
        "pyproject.toml lists yeto.services.gone, which has no folder"]


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
    found = io_violations(tmp_path, pure_cores(tmp_path, steps=()))
    assert len(found) == 1 and found[0].startswith("services/launcher/state.py:"), found


def test_the_purity_check_catches_a_listed_step_or_exemption_that_no_longer_exists(tmp_path):
    _tree(tmp_path, {"services/syncer/merge.py": "import math", "schemas/events.py": "from dataclasses import dataclass"})
    steps = ("services/syncer/merge.py", "services/syncer/gone.py")
    assert io_violations(tmp_path, pure_cores(tmp_path, steps)) == [
        "services/syncer/gone.py: listed as a pure core, but there is no such file"]
    assert missing_exemptions(tmp_path) == ["schemas/base.py: exempt from purity, but there is no such file"]
