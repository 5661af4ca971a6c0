"""The Ascend check: what a user with Ascend NPUs runs to see Yeto's NPU path train (docs/ASCEND.md).

One PASS/FAIL line per step with its numbers; exit status 1 on any failure. Nothing here has run on an NPU:
`--dry` runs every step's command on the CPU at tiny size, which proves the commands, not the hardware.

    python scripts/ascend_check.py                 # on an Ascend host: torch_npu + CANN installed, Yeto installed
    python scripts/ascend_check.py --dry           # the same commands on the CPU (local:Nxcpu, gloo, f32)
    python scripts/ascend_check.py --steps policy lora_one_rank

Steps: `policy` (accel.detect on the device: kind, hccl, the dtype its generation gets, free memory),
`lora_one_rank` (a local:1xnpu island trains LoRA to an artifact: rounds merged, every loss finite),
`lora_two_ranks` (local:2xnpu: DDP over HCCL), `full_fsdp` (local:2xnpu, --tuning full --shard fsdp: FSDP2).
The model is the tests' tiny random-init Llama, so the losses say the path trains, not how well.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ)      # YETO_HOME is set to the work folder: the check's stack is its own, never the user's
STEPS = ("policy", "lora_one_rank", "lora_two_ranks", "full_fsdp")
POLICY = """
from yeto.learners import accel
a = accel.detect(prefer={device!r})
caps = accel.probe(a.kind)
print(f"check: kind={{a.kind}} device={{a.device}} backend={{a.dist_backend}} dtype={{a.compute_dtype}} "
      f"name={{caps.device_name or '-'}} free_gb={{accel.free_memory_bytes(a) / 1e9:.1f}}")
assert (a.kind, a.dist_backend) == ({device!r}, {backend!r})
"""


def run(argv: list[str], timeout_s: float) -> tuple[bool, str]:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, env=ENV)
    return done.returncode == 0, done.stdout + done.stderr


def launch(yeto: str, work: Path, run_id: str, gpu: str, steps: int, *flags: str) -> tuple[bool, str]:
    """One run to its artifact; passes when rounds were merged and every logged loss is finite (a NaN or inf is what a
    dtype or kernel the device mishandles shows first; the tiny random model's losses barely move in a few steps)."""
    ok, out = run([yeto, "launch", "--run-id", run_id, "--gpu", gpu, "--model", str(work / "tiny"), "--data",
                   str(work / "chat.jsonl"), "--max-steps", str(steps), "--seq-len", "128", "--yes", "--wait", *flags],
                  1200)
    if not ok:
        return False, out
    losses = [float(x) for x in re.findall(r"loss ([0-9.]+|nan|inf)", out)]
    _, sql = run([yeto, "sql", "--format", "csv",
                  f"select count(*) from events where run_id = '{run_id}' and type = 'RoundMerged'"], 120)
    rounds = int(sql.strip().splitlines()[-1])
    line = f"check: rounds_merged={rounds} loss(first, last)={losses[0] if losses else '-'} {losses[-1] if losses else '-'}"
    return rounds >= 1 and bool(losses) and all(math.isfinite(x) for x in losses), line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry", action="store_true", help="run every step's command on the CPU at tiny size")
    ap.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    ap.add_argument("--yeto", default=str(Path(sys.executable).parent / "yeto"), help="the yeto command to run")
    args = ap.parse_args()
    device, backend, steps = ("cpu", "gloo", 4) if args.dry else ("npu", "hccl", 40)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="yeto-ascend-") as tmp:
        work = Path(tmp)
        ENV["YETO_HOME"] = str(work / "home")
        sys.path.insert(0, str(ROOT / "tests" / "learner"))
        import learner_tiny
        learner_tiny.write_chat_jsonl(work / "chat.jsonl", 300)
        learner_tiny.write_model_dir(work / "tiny")
        checks = {
            "policy": lambda: run([sys.executable, "-c", POLICY.format(device=device, backend=backend)], 300),
            "lora_one_rank": lambda: launch(args.yeto, work, "asc-lora1", f"local:1x{device}", steps, "--tuning", "lora"),
            "lora_two_ranks": lambda: launch(args.yeto, work, "asc-lora2", f"local:2x{device}", steps, "--tuning", "lora"),
            "full_fsdp": lambda: launch(args.yeto, work, "asc-fsdp", f"local:2x{device}", steps, "--tuning", "full",
                                        "--shard", "fsdp"),
        }
        try:
            for name in args.steps:
                start = time.monotonic()
                ok, out = checks[name]()
                said = " ".join(line[7:] for line in out.splitlines() if line.startswith("check: "))
                print(f"{'PASS' if ok else 'FAIL'} {name} ({time.monotonic() - start:.0f} s) "
                      f"{said if ok else out[-1500:]}", flush=True)
                failures += not ok
        finally:
            subprocess.run([args.yeto, "stack", "down"], cwd=ROOT, capture_output=True, timeout=120, env=ENV)
    print(f"ascend_check: {failures} failure(s){' (dry: CPU, tiny sizes)' if args.dry else ''}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
