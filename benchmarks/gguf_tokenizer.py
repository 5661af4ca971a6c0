"""A GGUF model's tokenizer in the CLI: `yeto data check --model <gguf alias>` with a cold cache against a warm one.

    .venv/bin/python benchmarks/gguf_tokenizer.py [--repeats 3] [--model smollm2-135m] [--data PATH] [--json PATH]

Each repeat runs the same command twice under one fresh YETO_HOME: first with no cached tokenizer folder (transformers
reads the GGUF, as every call did before infra/gguf_tokenizer.py, and saves the folder), then with the folder
the first call left (read without transformers). The pairs alternate, so machine load hits both arms alike; both
reports must be the same, token counts included. Also printed: the warm load alone in this process, imports
excluded (resolve, the cache key: the sha256 of the GGUF's metadata, gguf_header.py; the folder checked and read).
Last line: gguf_tokenizer_warm_over_cold=<ratio of the medians>. With --json, the raw times, the commit, the command
and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
YETO = str(Path(sys.executable).parent / "yeto")


def check(home: Path, model: str, data: str) -> tuple[float, dict]:
    """Seconds of one `yeto data check --json` and its report."""
    env = {**os.environ, "YETO_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([YETO, "data", "check", "--data", data, "--model", model, "--json"], env=env, cwd=REPO,
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, json.loads(done.stdout)


def load_seconds(home: Path, model: str) -> float:
    """Seconds of the warm path in this process, imports excluded: resolve, the cache key, the folder checked and read."""
    from yeto.cli.data import load_tokenizer
    os.environ["YETO_HOME"] = str(home)
    tokenizer = load_tokenizer(model)                  # the imports; then the best of three
    assert type(tokenizer).__name__ == "FileTokenizer", f"--model {model}: no cached folder was read"
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        load_tokenizer(model)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="cold/warm pairs (default 3)")
    ap.add_argument("--model", default="smollm2-135m", help="a GGUF alias or .gguf path (default smollm2-135m)")
    ap.add_argument("--data", default="examples/data/chat_demo.jsonl", help="rows to check (relative to the repo)")
    ap.add_argument("--json", default=None, help="write the raw times, commit, command and machine here")
    args = ap.parse_args()
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="yeto-bench-gguf-") as home:
            cold, cold_report = check(Path(home), args.model, args.data)
            warm, warm_report = check(Path(home), args.model, args.data)
            load = load_seconds(Path(home), args.model)
        assert cold_report == warm_report and cold_report["tokens"], "the warm cache gave another report"
        times["cold"].append(cold)
        times["warm"].append(warm)
        print(f"cold {cold:6.2f} s   warm {warm:6.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"median: cold {med['cold']:.2f} s, warm {med['warm']:.2f} s; the warm load itself {load * 1000:.0f} ms")
    ratio = med["warm"] / med["cold"]
    if args.json:
        from lib_provenance import provenance
        Path(args.json).write_text(json.dumps({
            "times_s": times, "warm_load_s": load, "warm_over_cold": ratio, "provenance": provenance()}, indent=1))
    print(f"gguf_tokenizer_warm_over_cold={ratio:.3f}")


if __name__ == "__main__":
    main()
