"""How fast the `yeto` command starts: `yeto --help` wall time over `python -c pass` wall time, side by side.

    python benchmarks/cli_start.py [--repeats 15]

Both arms run as fresh processes of the same interpreter, alternated in one loop (so machine load hits both alike);
the ratio is of the medians. Also reported, not in the ratio: `yeto status --help` and `yeto launch --help`
(one command's module imported). Last line: cli_help_over_python_start=<ratio> (target <= 3).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

ARMS = {
    "python": [sys.executable, "-c", "pass"],
    "help": [sys.executable, "-c", "import sys; from yeto.cli.main import main; sys.exit(main(['--help']))"],
    "status_help": [sys.executable, "-m", "yeto.cli.main", "status", "--help"],
    "launch_help": [sys.executable, "-m", "yeto.cli.main", "launch", "--help"],
}


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    n = ap.parse_args().repeats
    for cmd in ARMS.values():   # warm the file cache and the bytecode once; not measured
        wall(cmd)
    times: dict[str, list[float]] = {k: [] for k in ARMS}
    for _ in range(n):
        for name, cmd in ARMS.items():
            times[name].append(wall(cmd))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:<12} median {v * 1000:8.1f} ms over {n}")
    print(f"cli_help_over_python_start={med['help'] / med['python']:.2f}")


if __name__ == "__main__":
    main()
