"""The import graph of a Yeto tree, read with ast (no imports run), and the import cycles in it.

Checks take the repository root, so a test can run them on the real tree (expect nothing found) and on a small
bad tree in tmp_path (expect it caught). Imports inside functions count (a lazy import is still a dependency);
imports under `if TYPE_CHECKING:` do not (they never run).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# Top-level folders and the names they import as (pyproject.toml's package-dir).
FOLDERS = {"yeto": "yeto", "schemas": "yeto.schemas", "infra": "yeto.infra", "services": "yeto.services",
           "learners": "yeto.learners"}


@dataclass(frozen=True)
class Import:
    source: str        # the importing module, dotted
    path: Path         # its file
    target: str        # the imported module (or the package when the name imported is not a module)
    line: int

    def __str__(self) -> str:
        return f"{self.path.as_posix()}:{self.line} imports {self.target}"


def modules(root: Path) -> dict[str, Path]:
    """Every module of the tree by its dotted name (packages by their __init__.py), fixtures left out."""
    found = {}
    for folder, dotted in FOLDERS.items():
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root / folder).with_suffix("").parts
            if "fixtures" in rel:
                continue
            parts = rel[:-1] if rel[-1] == "__init__" else rel
            found[".".join((dotted, *parts))] = path.relative_to(root)
    return found


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines |= set(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _targets(node: ast.Import | ast.ImportFrom, name: str, path: Path, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:   # relative: from the importing module's package upwards
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def imports(root: Path) -> list[Import]:
    """Every import statement of every module, resolved to dotted names."""
    known = modules(root)
    out = []
    for name, rel in sorted(known.items()):
        tree = ast.parse((root / rel).read_text())
        skip = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in skip:
                out += [Import(name, rel, t, node.lineno) for t in _targets(node, name, rel, known)]
    return out


def cycles(root: Path) -> list[list[str]]:
    """Groups of Yeto modules that import each other, directly or around a loop (Tarjan's components)."""
    known = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in known}
    for i in imports(root):
        if i.target in known and i.target != i.source:
            edges[i.source].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted(group + [v]))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found
