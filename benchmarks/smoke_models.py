"""Smoke-test models tier by tier: a short real `yeto launch --wait` per model, sequential, self-cleaning, pass/fail.

Tiers come from schemas/model_table.py's table (the bf16 base size): `cpu` is a random-init Llama built here
(runs on any machine), then 1 GPU (<= 40 GB base), 1 node (<= 320 GB), multi-node (larger). A model runs
only if this machine has enough local CUDA memory for the planner's memory model (services/planner);
otherwise it is reported as `skip` with the reason. Each model gets a fresh YETO_HOME that is stopped
(`yeto stack down`) and deleted afterwards; a model passes when the run ends RunFinalized with an artifact.

    .venv/bin/python benchmarks/smoke_models.py --dry-run                 # the plan: tiers, models, commands
    .venv/bin/python benchmarks/smoke_models.py --tiers cpu               # what runs on a CPU machine
    .venv/bin/python benchmarks/smoke_models.py --tiers cpu,1gpu --steps 20 --data examples/data/chat_demo.jsonl
Last line: `passed=<passed>/<run>`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
YETO = str(ROOT / ".venv" / "bin" / "yeto")
TIERS = (("cpu", 0.0), ("1gpu", 40.0), ("1node", 320.0), ("multinode", float("inf")), ("unsized", float("nan")))


def tier_of(gb: float | None) -> str:
    if gb is None:
        return "unsized"       # "(Hub)" entries: the size is known only from the Hub at plan time
    return next(name for name, limit in TIERS[1:4] if gb <= limit)


def plan(tiers: list[str]) -> list[tuple[str, str, float | None]]:
    from yeto.schemas.model_table import MODELS
    rows = [("cpu", "tiny-llama (built here)", None)] if "cpu" in tiers else []
    rows += [(tier_of(m.min_vram_gb), m.alias, m.min_vram_gb) for m in sorted(MODELS, key=lambda m: m.min_vram_gb or 0)]
    return [r for r in rows if r[0] in tiers]


def local_gpus() -> tuple[int, float]:
    try:
        import torch
        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            return n, n * torch.cuda.get_device_properties(0).total_memory / 1e9
    except Exception:  # noqa: BLE001 - a broken CUDA install reads as no GPU
        pass
    return 0, 0.0


def command(model: str, gpu: str, data: str, steps: int) -> list[str]:
    return [YETO, "launch", "--gpu", gpu, "--model", model, "--data", data, "--max-steps", str(steps), "--seq-len", "128",
            "--micro-batch", "2", "--sync-every", "4", "--fragments", "2", "--run-id", "smoke", "--wait"]


def smoke(model: str, gpu: str, data: str, steps: int, timeout_s: float) -> tuple[bool, str]:
    home = Path(tempfile.mkdtemp(prefix="yeto-smoke-"))
    env = {**os.environ, "YETO_HOME": str(home)}
    try:
        out = subprocess.run(command(model, gpu, data, steps), env=env, capture_output=True, text=True, timeout=timeout_s)
        if out.returncode != 0:
            return False, ((out.stderr.strip() or out.stdout.strip()).splitlines()[-1:][0]
                           if (out.stderr or out.stdout) else "failed")
        ends = subprocess.run([YETO, "sql", "--format", "csv", "select type from events where type in "
                               "('RunFinalized','ArtifactWritten','RunFailed')"], env=env, capture_output=True, text=True)
        ok = "RunFinalized" in ends.stdout and "ArtifactWritten" in ends.stdout
        return ok, "finalized with an artifact" if ok else f"ended without an artifact: {ends.stdout.split()[1:]}"
    except subprocess.TimeoutExpired:
        return False, f"no end within {timeout_s:.0f} s"
    finally:
        subprocess.run([YETO, "stack", "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiers", "--tier", default="cpu",
                    help=f"comma list of {', '.join(t for t, _ in TIERS)}, "
                         "or small (cpu,1gpu), medium (1node), large (multinode)")
    ap.add_argument("--data", default=str(ROOT / "examples/data/chat_demo.jsonl"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    groups = {"small": ["cpu", "1gpu"], "medium": ["1node"], "large": ["multinode", "unsized"]}
    tiers = [x for t in args.tiers.split(",") if t.strip() for x in groups.get(t.strip(), [t.strip()])]
    if bad := [t for t in tiers if t not in dict(TIERS)]:
        print(f"error: unknown tier(s) {', '.join(bad)}; use {', '.join(t for t, _ in TIERS)}", file=sys.stderr)
        return 2
    gpus, gpu_gb = local_gpus()
    work = Path(tempfile.mkdtemp(prefix="yeto-smoke-material-"))
    passed = ran = 0
    try:
        for tier, name, gb in plan(tiers):
            gpu = "local:1xcpu" if tier == "cpu" else f"local:{max(1, gpus)}xcuda"
            if tier != "cpu" and (gb is None or gpus == 0 or gb * 1.3 > gpu_gb):   # base + LoRA states (planner's _LORA_OVERHEAD)
                why = "no local GPU" if gpus == 0 else f"needs ~{(gb or 0) * 1.3:.0f} GB, {gpu_gb:.0f} GB here"
                print(f"{tier:9s} {name:28s} skip  ({why if gb is not None else 'size known only from the Hub'})")
                continue
            model, data = name, args.data
            if tier == "cpu" and not args.dry_run:
                import lib_task
                model = str(lib_task.write_tiny_model(work / "model", layers=2, hidden=32))
                data = str(lib_task.write_markov_chat(work / "chat.jsonl", 400))
            if args.dry_run:
                print(f"{tier:9s} {name:28s} plan  {' '.join(command(model, gpu, data, args.steps)[1:])}")
                continue
            ok, detail = smoke(model, gpu, data, args.steps, args.timeout_s)
            ran, passed = ran + 1, passed + ok
            print(f"{tier:9s} {name:28s} {'PASS' if ok else 'FAIL'}  {detail}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("dry_run=ok" if args.dry_run else f"passed={passed}/{ran}")
    return 0 if args.dry_run or passed == ran else 1


if __name__ == "__main__":
    sys.exit(main())
