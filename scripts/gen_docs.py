"""Regenerate the generated parts of the docs: the event catalogue in docs/ARCHITECTURE.md (from schemas/)
and the README's file tree (one line per file, from each module's docstring), between their markers.

    python scripts/gen_docs.py          # rewrite both
    python scripts/gen_docs.py --check  # exit 1 if either is out of date
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import yeto.schemas as schemas

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- catalogue:begin -->", "<!-- catalogue:end -->"
TREE_BEGIN, TREE_END = "<!-- tree:begin -->", "<!-- tree:end -->"
# Files whose purpose no docstring or heading states.
OTHER = {"Makefile": "setup, test, demo, bench, docs targets",
         "pyproject.toml": "the one `yeto` distribution, extras, pytest config",
         ".ci/run": "CI: set up from nothing, then `make test`", ".gitignore": "ignored build and state files",
         "README.md": "this page", "yeto/cli/dashboard/dashboard.html": "the `yeto dashboard` page: HTML, inline JS and SVG"}
SKIP_PARTS = {"fixtures"}
# Folders of data shown as one line: their files are outputs, named by the docs that quote them.
COLLAPSED = {"benchmarks/results": "raw outputs of the runs docs/BENCHMARK_RESULTS.md quotes, a folder per benchmark; "
                                   "NOTEBOOK.md, their history"}
BASE_FIELDS = {"type", "version", "id", "run_id", "ts", "causation_id", "source"}


def render() -> str:
    rows = ["| kind | type | v | owner / module | fields | what it means |", "|---|---|---|---|---|---|"]
    for (type_, version), cls in sorted(schemas.registry.classes.items(), key=lambda kv: (kv[1].kind, kv[0])):
        if not cls.__module__.startswith("yeto.schemas."):
            continue
        fields = ", ".join(f"`{n}`" for n in cls.model_fields if n not in BASE_FIELDS)
        owner = getattr(cls, "owner", "") or cls.__module__.rsplit(".", 1)[-1]
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        rows.append(f"| {cls.kind} | `{type_}` | {version} | {owner} | {fields} | {doc} |")
    return "\n".join(rows)


def describe(path: Path) -> str:
    rel = path.relative_to(ROOT).as_posix()
    if rel in OTHER:
        return OTHER[rel]
    folder = next((f for f in COLLAPSED if rel.startswith(f + "/")), None)
    if folder is not None:
        return COLLAPSED[folder]
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""
    if path.suffix == ".md":
        for line in path.read_text().splitlines():
            if line.startswith("#"):
                return line.lstrip("# ").strip()
    if path.suffix == ".sh":      # the first comment after the shebang
        comments = [line for line in path.read_text().splitlines()[1:] if line.startswith("# ")]
        return comments[0][2:].strip() if comments else ""
    if path.suffix in {".yaml", ".yml", ".toml"}:    # a config file: its first comment line
        comments = [line for line in path.read_text().splitlines() if line.startswith("# ")]
        return comments[0][2:].strip() if comments else ""
    if path.suffix in {".jsonl", ".json", ".csv", ".png"}:
        return "data"
    return ""


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return sorted(ROOT / f for f in out if not SKIP_PARTS & set(Path(f).parts) and (ROOT / f).is_file())


def render_tree() -> str:
    lines, seen_dirs = ["```"], set()
    for path in tracked_files():
        rel = path.relative_to(ROOT)
        folder = next((f for f in COLLAPSED if rel.as_posix().startswith(f + "/")), None)
        if folder is not None:
            parts = Path(folder).parts
            if parts not in seen_dirs:
                seen_dirs.add(parts)
                name = f"{parts[-1]}/"
                lines.append(f"{'  ' * (len(parts) - 1)}{name:<{34 - 2 * (len(parts) - 1)}} {COLLAPSED[folder]}")
            continue
        for depth in range(1, len(rel.parts)):
            d = rel.parts[:depth]
            if d not in seen_dirs:
                seen_dirs.add(d)
                lines.append(f"{'  ' * (depth - 1)}{d[-1]}/")
        desc = describe(path)
        lines.append(f"{'  ' * (len(rel.parts) - 1)}{rel.name:<{max(1, 34 - 2 * (len(rel.parts) - 1))}} {desc}".rstrip())
    return "\n".join(lines + ["```"])


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for doc, begin, end, body in ((DOC, BEGIN, END, render), (README, TREE_BEGIN, TREE_END, render_tree)):
        text = doc.read_text()
        if begin not in text or end not in text:
            print(f"{doc} lacks the markers {begin} ... {end}", file=sys.stderr)
            return 1
        new = replace_between(text, begin, end, body())
        if new != text:
            stale.append(doc.name)
            if not args.check:
                doc.write_text(new)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run `python scripts/gen_docs.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
