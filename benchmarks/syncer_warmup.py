"""The syncer's first rounds with their kernels compiled in them, against the same rounds once services/syncer/
warmup.py made the kernels, side by side in one run.

A child process with an empty numba cache of its own times `warmup.warm()` twice: the first call compiles every
kernel a round uses (what a run's first rounds cost on a head with an empty cache before 6520e13), the second finds
them made (what they cost after the syncer's warm-up). A second child on the now-filled cache times the warm-up a
restarted syncer pays. Each round: two pushes on a layers fragment and an embed one, ~200k values, then the broadcast.

    python benchmarks/syncer_warmup.py [--codec q4] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, time
from yeto.services.syncer.api import warmup
times = []
for _ in range(int(sys.argv[2])):
    started = time.monotonic()
    warmup.warm({"codec_up": sys.argv[1]})
    times.append(time.monotonic() - started)
print(json.dumps(times))
"""


def child(codec: str, calls: int, cache: str) -> list[float]:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, codec, str(calls)], capture_output=True, text=True, env=env,
                         check=True)
    return [float(t) for t in json.loads(out.stdout.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--codec", default="q4", help="the pushes' codec (q4, topk2, topk4, topk8, f32, bf16)")
    parser.add_argument("--repeats", type=int, default=1, help="fresh caches, one after another")
    args = parser.parse_args(argv)
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
            cold, made = child(args.codec, 2, cache)
            (restarted,) = child(args.codec, 1, cache)
        print(f"repeat {r}: codec {args.codec}: rounds with their kernels compiled in them {cold:.2f} s; "
              f"the same rounds after the warm-up {made:.3f} s; warm-up from a filled cache {restarted:.2f} s")
        print(f"made_over_compiled={made / cold:.4f}")


if __name__ == "__main__":
    main()
