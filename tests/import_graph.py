"""The import graph of a Yeto tree, read with ast (no imports run), and the import cycles in it.

Checks take the repository root, so a test can run them on the real tree (expect nothing found) and on a small
bad tree in tmp_path (expect it caught). Every import of a module is read: top level, inside functions (a lazy
import is still a dependency), in every branch of an `if` or `try`, under `if TYPE_CHECKING:` too (a type is a
dependency the layering judges), and `importlib.import_module("...")` / `__import__("...")` with a literal name.
An import under `if TYPE_CHECKING:` is marked `type_only`: it never runs, so it cannot close an import-time cycle.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from yeto.infra.package_dir import package_dir

REPO = Path(__file__).resolve().parents[1]
# Top-level folders and the names they import as: pyproject.toml's package-dir, read, not restated.
FOLDERS = {folder: name for name, folder in package_dir(REPO).items()}


@dataclass(frozen=True)
class Import:
    source: str        # the importing module, dotted
    path: Path         # its file
    target: str        # the imported module (or the package when the name imported is not a module)
    line: int
    type_only: bool = False   # under `if TYPE_CHECKING:`: read by type checkers, never run

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


def _is_type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING` or `typing.TYPE_CHECKING`: the only tests whose body never runs (`not TYPE_CHECKING` always does)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _type_only_nodes(tree: ast.AST) -> set[int]:
    """The ids of every node in the body of an `if TYPE_CHECKING:` (its `else:` runs, so it is not included)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def _dynamic_target(node: ast.AST) -> str | None:
    """The literal module name of `importlib.import_module("x")`, `import_module("x")` or `__import__("x")`."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id if isinstance(node.func, ast.Name) else ""
    name = node.args[0].value
    return name if func in ("import_module", "__import__") and isinstance(name, str) else None


def _targets(node: ast.Import | ast.ImportFrom, name: str, path: Path, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:   # relative: from the importing module's package upwards
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def _file_imports(root: Path, name: str, rel: Path, known: dict[str, Path]) -> list[Import]:
    tree = ast.parse((root / rel).read_text())
    type_only = _type_only_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = _targets(node, name, rel, known)
        elif (dynamic := _dynamic_target(node)) is not None:
            targets = [dynamic]
        else:
            continue
        out += [Import(name, rel, t, node.lineno, id(node) in type_only) for t in targets]
    return out


def imports(root: Path) -> list[Import]:
    """Every import of every module (see the module's docstring for what counts), resolved to dotted names."""
    known = modules(root)
    return [i for name, rel in sorted(known.items()) for i in _file_imports(root, name, rel, known)]


def script_imports(root: Path, folder: str) -> list[Import]:
    """Every import of the scripts in `folder` (benchmarks/: files run as scripts, no package), read as above; a
    script's source name is `folder.stem`."""
    known = modules(root)
    return [i for path in sorted((root / folder).glob("*.py"))
            for i in _file_imports(root, f"{folder}.{path.stem}", path.relative_to(root), known)]


def cycles(root: Path) -> list[list[str]]:
    """Groups of Yeto modules that import each other when they run, directly or around a loop (Tarjan's components);
    type-only imports never run, so they close no loop."""
    known = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in known}
    for i in imports(root):
        if i.target in known and i.target != i.source and not i.type_only:
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
