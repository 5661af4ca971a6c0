"""Admission is decided in one place: under services/syncer only admission/ makes a Rejection; roster.py holds state.

No module but admission/ constructs a Rejection, and roster.py defines no check beside its Roster dataclass; each check
also runs on a bad tree, its twin."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYNCER = Path("services/syncer")
ADMISSION = SYNCER / "admission"


def _called(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def rejections_outside_admission(root: Path) -> list[str]:
    """`path:line` of every `Rejection(...)` (or `admission.Rejection(...)`) under services/syncer outside admission/."""
    found = []
    for path in sorted((root / SYNCER).rglob("*.py")):
        rel = path.relative_to(root)
        if ADMISSION in rel.parents:
            continue
        lines = sorted(node.lineno for node in ast.walk(ast.parse(path.read_text()))
                       if isinstance(node, ast.Call) and _called(node.func) == "Rejection")
        found += [f"{rel.as_posix()}:{line}" for line in lines]
    return found


def checks_beside_the_roster(root: Path) -> list[str]:
    """Functions roster.py defines outside its Roster dataclass: a check there would be a second place of admission."""
    tree = ast.parse((root / SYNCER / "roster.py").read_text())
    return [f"{SYNCER.as_posix()}/roster.py:{node.lineno} {node.name}" for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


@pytest.mark.timeout(30)
def test_no_module_under_services_syncer_but_admission_constructs_a_rejection():
    assert rejections_outside_admission(ROOT) == []
    assert any(_called(node.func) == "Rejection" for path in (ROOT / ADMISSION).rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call))


@pytest.mark.timeout(30)
def test_roster_py_holds_the_roster_state_and_no_check():
    assert checks_beside_the_roster(ROOT) == []


BAD_TREE = {
    "services/syncer/admission/header.py": 'def chunk(h):\n    return Rejection("bad_header", "allowed: admission decides")\n',
    "services/syncer/intake.py": 'def take(h):\n    refusal = Rejection("bad_header", "a second place")\n    return refusal\n',
    "services/syncer/core.py": 'def _push(h):\n    return admission.Rejection("duplicate", "and a third")\n',
    "services/syncer/roster.py": 'class Roster:\n    pass\n\n\ndef tokens(h, roster):\n    return None\n',
}


@pytest.mark.timeout(30)
def test_the_checks_catch_a_rejection_outside_admission_and_a_check_beside_the_roster(tmp_path):
    for rel, text in BAD_TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert rejections_outside_admission(tmp_path) == ["services/syncer/core.py:2", "services/syncer/intake.py:2"]
    assert checks_beside_the_roster(tmp_path) == ["services/syncer/roster.py:5 tokens"]
