"""Every benchmark script answers --help with its usage and exit 0, without running anything: one child process
imports them in turn (torch is imported once), so a benchmark broken by a move or a rename fails here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("lib_"))

# Run in a child: runpy executes each script as __main__ with argv [script, --help], as the shell would.
CHILD = r"""
import contextlib, io, json, runpy, sys
sys.path.insert(0, "benchmarks")       # a script's own folder is on its path when run from the shell
verdicts = {}
for name in sys.argv[1:]:
    sys.argv = [f"benchmarks/{name}", "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(f"benchmarks/{name}", run_name="__main__")
        verdicts[name] = "ran without --help stopping it"
    except SystemExit as e:
        verdicts[name] = "ok" if e.code in (0, None) and out.getvalue().startswith("usage:") else f"exit {e.code!r}"
    except Exception as e:  # noqa: BLE001 - each script's failure is reported, not the first one's
        verdicts[name] = f"{type(e).__name__}: {e}"
print(json.dumps(verdicts))
"""


def test_every_benchmark_prints_its_usage_on_help_and_runs_nothing():
    assert len(SCRIPTS) >= 20, SCRIPTS          # the folder is where it is (an empty glob would pass vacuously)
    done = subprocess.run([sys.executable, "-c", CHILD, *SCRIPTS], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    verdicts = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(verdicts) == set(SCRIPTS)
    assert {name: v for name, v in verdicts.items() if v != "ok"} == {}
