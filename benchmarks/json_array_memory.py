"""Peak RSS of reading a `.json` array of rows: the old whole-file parse against the streamed reader, same file, side by side.

    python benchmarks/json_array_memory.py [--mb 64] [--largest-mb 4] [--new-only-mb 0]

One generated file: a largest row (--largest-mb of text) then ~2 KiB chat rows up to --mb. Each arm runs in a process
of its own and prints its peak RSS (ru_maxrss) above the same process's after its imports:
  old      json.loads of the whole file, then every row walked (what learners/data/sources.py did before, in memory)
  new      learners/data/jsonarray.py: one pass for the row spans, each row parsed when read
  check    `yeto data check --data FILE` with the new reader (normalizing every row, no tokenizer)
--new-only-mb N also runs `new` and `check` on an N MiB file (the old reader would need ~120x N of memory).
Last line: each arm's growth over the largest row (issue 41's target: check <= 4x).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROW = {"messages": [{"role": "user", "content": "what is " + "q " * 450}, {"role": "assistant", "content": "a " * 450}]}


def generate(path: Path, mb: int, largest_mb: int) -> int:
    """Write the file; returns the largest row's size in bytes."""
    largest = json.dumps({"messages": [{"role": "user", "content": "Q" * (largest_mb << 20)},
                                       {"role": "assistant", "content": "A"}]})
    row = json.dumps(ROW)
    with open(path, "w") as f:
        f.write("[" + largest)
        for _ in range(max(0, ((mb << 20) - len(largest)) // (len(row) + 2))):
            f.write(",\n" + row)
        f.write("]\n")
    return len(largest)


def child(arm: str, path: str) -> None:
    if arm == "old":
        start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with open(path, "rb") as f:
            items = json.loads(f.read())
        n = sum(1 for item in items if isinstance(item, dict))
    elif arm == "new":
        from yeto.learners.data import open_source
        start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        n = sum(1 for row in open_source(path) if row.error is None)
    else:
        from yeto.cli.main import main
        from yeto.learners.data import check_data  # noqa: F401 - imported before the baseline, like the arms above
        start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        n = main(["data", "check", "--data", path, "--json"])
    print(json.dumps({"rows_or_rc": n, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "start_kib": start}))


def run_arm(arm: str, path: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", arm, str(path)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=64, help="size of the file all three arms read (default 64)")
    p.add_argument("--largest-mb", type=int, default=4, help="text in the largest row, MiB (default 4)")
    p.add_argument("--new-only-mb", type=int, default=0, help="also read a file this big with the new reader only")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(*a.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        sizes = [(a.mb, ("old", "new", "check"))] + ([(a.new_only_mb, ("new", "check"))] if a.new_only_mb else [])
        for mb, arms in sizes:
            path = Path(tmp) / f"rows-{mb}.json"
            largest = generate(path, mb, a.largest_mb)
            print(f"file {path.stat().st_size / 2**20:.0f} MiB, largest row {largest / 2**20:.1f} MiB")
            line = []
            for arm in arms:
                r = run_arm(arm, path)
                grew = (r["peak_kib"] - r["start_kib"]) * 1024
                print(f"  {arm:<6} peak RSS {r['peak_kib'] / 1024:8.0f} MiB, +{grew / 2**20:7.0f} MiB after imports")
                line.append(f"{arm} {grew / largest:.1f}x")
            path.unlink()
            print("  growth over the largest row: " + ", ".join(line))


if __name__ == "__main__":
    main()
