"""A GGUF model's tokenizer in the CLI: `yeto data check --model <gguf alias>` with a cold cache against a warm one.

    .venv/bin/python benchmarks/gguf_tokenizer.py [--repeats 3] [--model smollm2-135m] [--data PATH] [--json PATH]

Each repeat runs the same command twice under one fresh YETO_HOME: first with no cached tokenizer folder (transformers
reads the GGUF, as every call did before infra/gguf_tokenizer.py, and saves the folder), then with the folder
the first call left (read without transformers). The pairs alternate, so machine load hits both arms alike; both
reports must be the same, token counts included. Also printed: the warm load alone in this process, imports
excluded (resolve, the cache key: the sha256 of the GGUF's metadata, gguf_header.py; the folder checked and read).
Last line: gguf_tokenizer_warm_over_cold=<ratio of the medians>. With --json, the raw times, the commit, the command
and the machine.

    .venv/bin/python benchmarks/gguf_tokenizer.py --reads [--repeats 3] [--model smollm2-135m] [--json PATH]

--reads: what a cold cache costs, with and without infra/gguf_reads.py (gguf-py's read-only maps as plain arrays).
Each repeat runs two fresh processes, in alternating order, that each read the GGUF through transformers as a
first run does: its tokenizer (the derivation gguf_tokenizer.py caches), then its model dequantized to f32 (what
learners/torch/model.py caches); CPU seconds of each part, imports excluded. Both arms must save byte-identical
tokenizer folders and identical weights. Last line: gguf_reads_cpu_plain_over_memmap=<ratio of the median totals>.
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


READ = r"""
import hashlib, json, sys, time
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from yeto.infra import gguf_reads
from yeto.infra.model_source import resolve
plain, out = sys.argv[1] == "plain", Path(sys.argv[2])
source = resolve(sys.argv[3])
if plain:
    gguf_reads.install()
c0 = time.process_time()
tok = AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file)
c1 = time.process_time()
model = AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file, dtype="float32")
c2 = time.process_time()
tok.save_pretrained(str(out))
digest = hashlib.sha256()
for name, tensor in sorted(model.state_dict().items()):
    digest.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
print(json.dumps({"tokenizer_cpu_s": c1 - c0, "model_cpu_s": c2 - c1, "weights": digest.hexdigest()}))
"""


def reads(args) -> None:
    """--reads (the module's docstring)."""
    import filecmp
    runs: dict[str, list[dict]] = {"memmap": [], "plain": []}
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="yeto-bench-reads-") as tmp:
            order = ("memmap", "plain") if i % 2 == 0 else ("plain", "memmap")
            for arm in order:
                done = subprocess.run([sys.executable, "-c", READ, arm, f"{tmp}/{arm}", args.model], cwd=REPO,
                                      env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, check=True)
                runs[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
            same = filecmp.dircmp(f"{tmp}/memmap", f"{tmp}/plain")
            assert not (same.diff_files or same.left_only or same.right_only), f"tokenizer folders differ: {same.report()}"
            assert runs["memmap"][-1]["weights"] == runs["plain"][-1]["weights"], "the weights differ"
        print("  ".join(f"{arm}: tokenizer {r[-1]['tokenizer_cpu_s']:.2f} + model {r[-1]['model_cpu_s']:.2f} CPU s"
                        for arm, r in runs.items()), flush=True)
    total = {arm: statistics.median(x["tokenizer_cpu_s"] + x["model_cpu_s"] for x in r) for arm, r in runs.items()}
    tok = {arm: statistics.median(x["tokenizer_cpu_s"] for x in r) for arm, r in runs.items()}
    print(f"median CPU s: memmap {total['memmap']:.2f} (tokenizer {tok['memmap']:.2f}), "
          f"plain {total['plain']:.2f} (tokenizer {tok['plain']:.2f}); identical folders and weights")
    ratio = total["plain"] / total["memmap"]
    if args.json:
        from lib_provenance import provenance
        Path(args.json).write_text(json.dumps({"runs": runs, "plain_over_memmap": ratio, "provenance": provenance()},
                                              indent=1))
    print(f"gguf_reads_cpu_plain_over_memmap={ratio:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="cold/warm pairs (default 3)")
    ap.add_argument("--model", default="smollm2-135m", help="a GGUF alias or .gguf path (default smollm2-135m)")
    ap.add_argument("--data", default="examples/data/chat_demo.jsonl", help="rows to check (relative to the repo)")
    ap.add_argument("--json", default=None, help="write the raw times, commit, command and machine here")
    ap.add_argument("--reads", action="store_true", help="a cold read with and without infra/gguf_reads.py (docstring)")
    args = ap.parse_args()
    if args.reads:
        return reads(args)
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
