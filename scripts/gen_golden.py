"""Record golden histories, on purpose only (tests compare against them and never write them).

    .venv/bin/python scripts/gen_golden.py --syncer     # tests/training/fixtures/syncer_golden.json

A refactor must leave them unchanged: same seed, same history. Regenerate only for a change of behaviour
that is meant, and say so in the commit (the diff of the fixture is the behaviour's diff).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYNCER = ROOT / "tests" / "training" / "fixtures" / "syncer_golden.json"


def syncer() -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "training"))
    import syncer_scenario

    SYNCER.parent.mkdir(parents=True, exist_ok=True)
    history = syncer_scenario.history()
    lines = ",\n".join(f'  "{key}": [\n' + ",\n".join("    " + json.dumps(item) for item in value) + "\n  ]"
                        if isinstance(value, list) else f'  "{key}": {json.dumps(value)}' for key, value in history.items())
    SYNCER.write_text("{\n" + lines + "\n}\n")             # one round a line: the fixture's diff reads as the history's
    return SYNCER


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncer", action="store_true", help="the syncer's merge history (tests/training/syncer_scenario.py)")
    args = ap.parse_args()
    if not args.syncer:
        ap.error("say which history to record (--syncer)")
    print(f"wrote {syncer().relative_to(ROOT)}")


if __name__ == "__main__":
    main()
