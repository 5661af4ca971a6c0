"""What a pure core (logic.py, state.py, the shared projections) may not touch, found with ast: no clock, file, env or network.

`io_violations(root, files)` returns one readable line per offending import, call or attribute, so a test can run
it on the real cores (expect none) and on a bad file in tmp_path (expect it caught). A file listed here by name that
is not in the tree is a finding too: a list that quietly shrinks would stop checking what it names.
"""
from __future__ import annotations

import ast
from pathlib import Path

# Modules whose import alone means I/O (processes, sockets, the bus, the tape, stores, randomness of ids).
IO_MODULES = {"subprocess", "socket", "nats", "duckdb", "requests", "urllib", "http", "shutil", "tempfile",
              "sqlite3", "boto3", "fsspec", "huggingface_hub", "uuid", "secrets"}
# Names that read the clock or the environment, as `module.name` or `from module import name`.
IO_NAMES = {("os", "environ"), ("os", "getenv"), ("os", "getcwd"), ("os", "listdir"), ("time", "time"),
            ("time", "monotonic"), ("time", "perf_counter"), ("time", "sleep"), ("datetime", "now"),
            ("datetime", "utcnow"), ("datetime", "today"), ("date", "today")}
# Methods of pathlib (and file objects) that touch the file system.
PATH_IO = {"read_text", "write_text", "read_bytes", "write_bytes", "open", "exists", "is_file", "is_dir", "mkdir",
           "iterdir", "glob", "rglob", "unlink", "stat", "touch", "rename", "rmdir"}
BUILTINS = {"open", "input"}


def _findings(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, f"imports {a.name}") for a in node.names if a.name.split(".")[0] in IO_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in IO_MODULES:
                out.append((node.lineno, f"imports {node.module}"))
            out += [(node.lineno, f"imports {top}.{a.name}") for a in node.names if (top, a.name) in IO_NAMES]
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else \
                node.value.attr if isinstance(node.value, ast.Attribute) else None
            if (owner, node.attr) in IO_NAMES:
                out.append((node.lineno, f"uses {owner}.{node.attr}"))
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in BUILTINS:
                out.append((node.lineno, f"calls {node.func.id}()"))
            elif isinstance(node.func, ast.Attribute) and node.func.attr in PATH_IO:
                out.append((node.lineno, f"calls .{node.func.attr}()"))
    return sorted(set(out))


def io_violations(root: Path, files: list[Path]) -> list[str]:
    """Each clock, file, environment or network use in `files` (paths relative to `root`), and each one missing."""
    missing = [f"{rel.as_posix()}: listed as a pure core, but there is no such file" for rel in files
               if not (root / rel).is_file()]
    return missing + [f"{rel.as_posix()}:{line} {what}" for rel in files if (root / rel).is_file()
                      for line, what in _findings(ast.parse((root / rel).read_text()))]


# schemas/ modules allowed to look at this machine, and why.
IMPURE_SCHEMAS = {"base.py": "a new message takes a fresh id and the clock's time (strict writers)"}

# The push path's pure steps (services/syncer/core.py lists the path) and the learner's pure parts.
PURE_STEPS = tuple(f"services/syncer/{m}.py" for m in ("admission/header", "admission/payload", "ledger", "rounds", "grace",
                                                        "merge", "rows", "gram", "runs", "outputs")) + (
    "learners/keyframe_demand.py", "learners/transport/keyframes.py", "learners/transport/reports.py",
    "learners/transport/denials.py", "services/launcher/memory_fit.py", "services/launcher/liveness.py")


def pure_cores(root: Path, steps: tuple[str, ...] = PURE_STEPS) -> list[Path]:
    """Every logic.py and state.py, all of schemas/ but IMPURE_SCHEMAS, and the pure `steps` (listed: a missing
    one stays in the list, for io_violations to report)."""
    cores = [p.relative_to(root) for name in ("logic.py", "state.py") for p in (root / "services").rglob(name)]
    cores += [p.relative_to(root) for p in (root / "schemas").rglob("*.py")
              if "fixtures" not in p.parts and p.name not in IMPURE_SCHEMAS]
    return sorted({*cores, *map(Path, steps)})


def missing_exemptions(root: Path) -> list[str]:
    """IMPURE_SCHEMAS entries with no file under schemas/: an exemption outliving its file would excuse the next one."""
    return [f"schemas/{name}: exempt from purity, but there is no such file" for name in sorted(IMPURE_SCHEMAS)
            if not (root / "schemas" / name).is_file()]


