"""Regenerate the golden JSON fixtures of every message type and version (on purpose only).

    python scripts/gen_fixtures.py          # write missing fixtures (never overwrites a shipped one)
    python scripts/gen_fixtures.py --check  # exit 1 if a registered type/version has no fixture

A shipped fixture is never edited: a changed event gets a new version, an upcaster, and a new fixture.
"""
from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

import yeto.schemas as schemas

FIXTURES = Path(schemas.__file__).parent / "fixtures"


def examples() -> dict[tuple[str, int], dict]:
    out = {}
    for info in pkgutil.iter_modules(schemas.__path__):
        module = importlib.import_module(f"yeto.schemas.{info.name}")
        for msg in getattr(module, "EXAMPLES", []):
            out[(msg.type, msg.version)] = json.loads(msg.model_dump_json())
    return out


def fixture_path(type_: str, version: int) -> Path:
    return FIXTURES / f"{type_}.v{version}.json"


def shipped_classes() -> list[tuple[str, int]]:
    return sorted(k for k, cls in schemas.registry.classes.items() if cls.__module__.startswith("yeto.schemas."))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    ex, missing = examples(), []
    for key in shipped_classes():
        path = fixture_path(*key)
        if path.exists():
            continue
        if args.check or key not in ex:
            missing.append(f"{key[0]} v{key[1]}" + ("" if key in ex else " (no EXAMPLES entry)"))
            continue
        path.write_text(json.dumps(ex[key], indent=2, sort_keys=True) + "\n")
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    if missing:
        print("missing fixtures:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
