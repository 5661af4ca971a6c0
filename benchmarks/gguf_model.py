"""A GGUF model's weights in a learner: transformers' dequantizing read of the .gguf (cold cache) against the
safetensors folder that read saved (warm), each in a fresh process as a learner's build does it.

    .venv/bin/python benchmarks/gguf_model.py [--repeats 2] [--model smollm2-135m] [--json PATH]

Each repeat runs the same child twice under one fresh YETO_HOME: first with no cached model folder (load_model reads
the GGUF, as every learner and every start did before learners/data/gguf_model.py, and saves the folder), then with
the folder the first left (its manifest checked: the sha256 of the GGUF and of every file in the folder). The child
prints the seconds of load_model alone (imports excluded) and a checksum of the weights; both must agree. The pairs
alternate, so machine load hits both arms alike. Last line: gguf_model_warm_over_cold=<ratio of the medians of the
load seconds>. With --json, the raw times, the commit, the command and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = """import json, sys, time
import torch
from yeto.learners.torch.model import load_model, resolve
source = resolve(sys.argv[1])
t0 = time.perf_counter()
model = load_model(source)
seconds = time.perf_counter() - t0
sums = [float(p.double().sum()) for p in model.state_dict().values()]
print(json.dumps({"load_s": seconds, "checksum": sums}))"""


def load(home: Path, model: str) -> dict:
    env = {**os.environ, "YETO_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, model], env=env, cwd=REPO, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2, help="cold/warm pairs (default 2)")
    ap.add_argument("--model", default="smollm2-135m", help="a GGUF alias or .gguf path (default smollm2-135m)")
    ap.add_argument("--json", default=None, help="write the raw times, commit, command and machine here")
    args = ap.parse_args()
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="yeto-bench-gguf-model-") as home:
            cold = load(Path(home), args.model)
            warm = load(Path(home), args.model)
        assert cold["checksum"] == warm["checksum"], "the cached folder gave other weights"
        times["cold"].append(cold["load_s"])
        times["warm"].append(warm["load_s"])
        print(f"cold {cold['load_s']:6.2f} s   warm {warm['load_s']:6.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["warm"] / med["cold"]
    print(f"median load_model: cold {med['cold']:.2f} s, warm {med['warm']:.2f} s")
    if args.json:
        from lib_provenance import provenance
        Path(args.json).write_text(json.dumps({"times_s": times, "warm_over_cold": ratio,
                                               "provenance": provenance()}, indent=1))
    print(f"gguf_model_warm_over_cold={ratio:.3f}")


if __name__ == "__main__":
    main()
