"""Regenerate the event catalogue in docs/ARCHITECTURE.md from schemas/ (between its markers).

    python scripts/gen_docs.py          # rewrite the catalogue
    python scripts/gen_docs.py --check  # exit 1 if docs/ARCHITECTURE.md is out of date
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yeto.schemas as schemas

DOC = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"
BEGIN, END = "<!-- catalogue:begin -->", "<!-- catalogue:end -->"
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"{DOC} lacks the markers {BEGIN} ... {END}", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    new = f"{head}{BEGIN}\n{render()}\n{END}{rest.split(END, 1)[1]}"
    if args.check:
        if new != text:
            print("docs/ARCHITECTURE.md is out of date: run `python scripts/gen_docs.py`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
