"""The architecture of DESIGN.md, checked: import rules, the package list, the public API, the CLI."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"yeto": "yeto", "schemas": "yeto.schemas", "infra": "yeto.infra", "services": "yeto.services",
           "learners": "yeto.learners"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _files(folder: str) -> list[Path]:
    return [p for p in (ROOT / folder).rglob("*.py") if "fixtures" not in p.parts]


def test_schemas_import_nothing_of_yeto_but_schemas_and_do_no_io():
    for path in _files("schemas"):
        bad = {m for m in _imports(path) if m.startswith("yeto") and not m.startswith("yeto.schemas")}
        bad |= {m for m in _imports(path) if m.split(".")[0] in {"nats", "duckdb", "subprocess", "socket", "requests"}}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_services_never_import_each_other():
    for service in ("planner", "launcher", "syncer", "finalizer"):
        others = {f"yeto.services.{s}" for s in ("planner", "launcher", "syncer", "finalizer") if s != service}
        for path in _files(f"services/{service}"):
            bad = {m for m in _imports(path) if any(m == o or m.startswith(o + ".") for o in others)}
            assert not bad, f"{path.relative_to(ROOT)} imports another service: {bad}"


def test_learners_reach_the_bus_only_through_one_module():
    allowed = {ROOT / "learners" / "bus_client.py"}
    for path in _files("learners"):
        if path in allowed:
            continue
        bad = {m for m in _imports(path) if m.split(".")[0] == "nats" or m.startswith("yeto.infra")
               or m.startswith("yeto.services")}
        assert not bad, f"{path.relative_to(ROOT)} reaches {bad}; go through learners/bus_client.py"


def test_every_package_folder_is_listed_in_pyproject():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
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
