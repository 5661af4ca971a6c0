"""Quality of Yeto's islands against synchronous data parallelism on equal hardware, tokens, data order and seeds.

Arms (docs/LM_BENCHMARK.md): `sync` (M ranks averaging gradients every step) and Yeto settings
(benchmarks/lib_compare.py SETTINGS: the default recipe and variants) with M islands through the real
DilocoHook/DilocoSync and SyncerCore. Quality = held-out masked cross-entropy of the model exported
from the syncer's f32 state, per seed; the table gives Δ% against `sync` at the same seed.

    .venv/bin/python benchmarks/compare_diloco.py --settings all --dry-run
    .venv/bin/python benchmarks/compare_diloco.py --settings default,direct --seeds 0,1,2
    .venv/bin/python benchmarks/compare_diloco.py --settings default,direct,alpha0 --seeds 0,1,2,3,4 \
        --sync-lrs 1e-3,2e-3,3e-3,6e-3 --tune-seeds 100,101 --eval-every 20
    .venv/bin/python benchmarks/compare_diloco.py --model smollm2-135m --data examples/data/chat_demo.jsonl \
        --tuning lora --lr 3e-4 --steps 480 --micro-batch 8 --seq-len 512 --device cuda
Without --model/--data it builds a random-init Llama (--layers, --hidden) and a synthetic order-1 Markov
chat corpus with a known entropy floor (benchmarks/lib_task.py).

A tuned baseline: `--sync-lrs` sweeps the sync arm's lr (warmup scaled with lr: `scaled_warmup`) on
`--tune-seeds` (100,101 by default; never reporting seeds), and the lr with the lowest mean held-out CE
there is the sync arm's lr on the reporting seeds; `--yeto-lrs` does the same for each Yeto setting.
Statistics: Δ% of every arm against sync is paired per seed, given as mean and 95% confidence interval
(Student t, n - 1 df, over the per-seed differences). `--eval-every K`: held-out CE every K steps, and
the step at which each arm first reaches sync's final CE of the same seed. The last line is
`default_delta_pct=<mean Δ%> ci95=[<lo>,<hi>] n=<seeds>` for the default recipe (or the first Yeto setting run).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import lib_compare as lc
from lib_compare import SETTINGS, step_times
from lib_provenance import provenance

from yeto.schemas.recipe import SyncConfig


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="model alias, HF id, directory or .gguf (default: a random-init Llama built here)")
    ap.add_argument("--data", help="chat JSONL / dataset (default: the synthetic Markov chat corpus)")
    ap.add_argument("--tuning", choices=("full", "lora"), help="default: full for the built model, lora otherwise")
    ap.add_argument("--settings", default="default,direct", help=f"all, or some of: {', '.join(SETTINGS)}")
    ap.add_argument("--recipe", action="append", default=[], metavar="KEY=VALUE",
                    help="change the base SyncConfig of every Yeto arm (e.g. outer_lr=1.0); repeatable")
    ap.add_argument("--seeds", default="0,1,2", help="reporting seeds")
    ap.add_argument("--sync-lrs", help="tune the sync arm: sweep these lrs (comma-separated, >= 2) on --tune-seeds")
    ap.add_argument("--yeto-lrs", help="tune every Yeto setting's inner lr the same way (default: --lr for all); "
                                       "one lr: run the Yeto arms at it, on the tuning seeds too")
    ap.add_argument("--tune-seeds", help="seeds of the lr sweeps, disjoint from --seeds (default 100,101; "
                    "none: one --yeto-lrs lr on the reporting seeds only)")
    ap.add_argument("--tune-only", action="store_true", help="run the sweeps and stop (no reporting seeds)")
    ap.add_argument("--eval-every", type=int, default=0, metavar="K",
                    help="held-out CE every K steps: steps to reach sync's final CE (0: final CE only)")
    ap.add_argument("--islands", type=int, default=2, help="M: islands in Yeto, ranks in sync")
    ap.add_argument("--steps", type=int, default=240, help="inner steps per island (= sync steps)")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "npu"))
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--heldout-blocks", type=int, default=64)
    ap.add_argument("--workdir", default="/tmp/yeto-compare")
    ap.add_argument("--out", help="write every outcome as JSON here")
    ap.add_argument("--reuse", action="append", default=[], metavar="JSON",
                    help="take runs (arm, seed, lr, --eval-every) from an earlier --out of the same task instead of "
                         "running them again (the simulation is deterministic); repeatable")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    return ap.parse_args(argv)


def seed_list(spec: str, flag: str) -> list[int]:
    try:
        seeds = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"{flag} {spec!r}: write integer seeds separated by commas, e.g. {flag} 0,1,2") from None
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{flag} {spec!r}: a seed is listed twice")
    return seeds


def plan(args):
    """Validated pieces: settings, seeds, base sync config, sweeps (raises ValueError on bad flags)."""
    names = lc.pick(args.settings)
    seeds = seed_list(args.seeds, "--seeds")
    if not seeds or args.islands < 1 or args.steps < 1:
        raise ValueError("need at least one seed, one island and one step")
    if args.eval_every < 0:
        raise ValueError(f"--eval-every {args.eval_every}: give a number of steps, or 0 for final CE only")
    base = base_config(args)
    configs = {n: SyncConfig.from_dict({**base.to_dict(), **SETTINGS[n].sync}) for n in names}
    sweeps = {"sync": lc.parse_lrs(args.sync_lrs, "--sync-lrs") if args.sync_lrs else [args.lr],
              **{n: lc.parse_lrs(args.yeto_lrs, "--yeto-lrs", least=1) if args.yeto_lrs else [args.lr] for n in names}}
    untuned = args.tune_seeds == "none"          # one --yeto-lrs lr, reporting seeds only (nothing is tuned)
    if untuned and (args.sync_lrs or len(sweeps[names[0]]) != 1):
        raise ValueError("--tune-seeds none: only with one --yeto-lrs lr and no --sync-lrs")
    tuned = args.sync_lrs or (args.yeto_lrs and not untuned)
    if args.tune_seeds is not None and not untuned and not tuned:
        raise ValueError("--tune-seeds without --sync-lrs or --yeto-lrs: there is nothing to tune")
    tune_seeds = seed_list(args.tune_seeds or "100,101", "--tune-seeds") if tuned and not untuned else []
    if args.tune_only and not tuned:
        raise ValueError("--tune-only without --sync-lrs or --yeto-lrs: there is nothing to run")
    if tuned and not tune_seeds:
        raise ValueError("--tune-seeds: give at least one tuning seed")
    if shared := sorted(set(tune_seeds) & set(seeds)):
        raise ValueError(f"tuning seed(s) {', '.join(map(str, shared))} are also reporting seeds (--seeds): "
                         "an lr chosen on the seeds it is reported on flatters that arm; use disjoint seeds")
    return names, seeds, base, configs, sweeps, tune_seeds


def base_config(args) -> SyncConfig:
    """The Yeto arms' base recipe: this checkout's SyncConfig defaults with the --recipe changes."""
    return SyncConfig.from_dict({**SyncConfig().to_dict(), **lc.parse_overrides(args.recipe)})


def warmup_for(args, lr: float) -> int:
    return lc.scaled_warmup(lr, args.lr, args.warmup)


def recipe_for(args, seed: int):
    import lib_task

    from yeto.learners.torch.api import TrainRecipe
    work = Path(args.workdir)
    model = args.model or str(lib_task.write_tiny_model(work / f"model-l{args.layers}-h{args.hidden}-s{seed}",
                                                        layers=args.layers, hidden=args.hidden, seed=seed))
    data = args.data or str(lib_task.write_markov_chat(work / "markov.jsonl"))
    tuning = args.tuning or ("lora" if args.model else "full")
    return TrainRecipe(model=model, data=data, tuning=tuning, lr=args.lr, warmup_steps=args.warmup, max_steps=args.steps,
                       micro_batch=args.micro_batch, seq_len=args.seq_len, seed=seed, heldout_fraction=0.05)


def swept(args, name: str) -> bool:
    """Whether the arm runs on the tuning seeds: sync with --sync-lrs, a Yeto arm with --yeto-lrs (even one lr)."""
    return bool(args.sync_lrs if name == "sync" else args.yeto_lrs and args.tune_seeds != "none")


TASK_FLAGS = ("model", "data", "tuning", "recipe", "islands", "steps", "micro_batch", "seq_len", "lr", "warmup", "layers",
              "hidden", "device", "heldout_blocks")
"""The flags that define the task: a run can be reused only from an output made with the same ones
(`recipe`, the Yeto arms' SyncConfig, excepted for the sync arm, which has none). A Yeto run is reused only if its
output's base SyncConfig equals this one field for field: a default changed since (or a field added since) makes
the old runs another recipe's."""

REUSED: dict[tuple, dict] = {}
"""(arm, seed, lr, warmup, eval_every) -> the record of a run read from --reuse."""


def load_reused(args) -> None:
    for path in args.reuse:
        got = json.loads(Path(path).read_text())
        differ = [k for k in TASK_FLAGS if got["args"].get(k) != getattr(args, k)]
        if [k for k in differ if k != "recipe"]:
            raise ValueError(f"--reuse {path}: made with other {', '.join('--' + k.replace('_', '-') for k in differ)}")
        every = got["args"].get("eval_every", 0)
        same_recipe = not differ and got.get("base") == base_config(args).to_dict()
        for group, runs_every in ((got.get("sweeps", {}), 0), (got["results"], every)):
            for name, runs in group.items():
                if not same_recipe and name != "sync":      # another recipe: only the sync arm's runs are the same
                    continue
                for r in runs:
                    REUSED[(name, r["seed"], r["lr"], r["warmup"], runs_every)] = {**r, "reused_from": Path(path).name}


def run_arm(args, name: str, configs, seed: int, lr: float, eval_every: int = 0) -> dict:
    """One arm at one seed and lr (warmup scaled with it): the JSON record of the run."""
    import lib_arms
    recipe = recipe_for(args, seed).replace(lr=lr, warmup_steps=warmup_for(args, lr))
    if (old := REUSED.get((name, seed, lr, recipe.warmup_steps, eval_every))) is not None:
        print(f"seed {seed} {name} lr={lr:g} warmup={recipe.warmup_steps} ce={old['heldout_ce']:.4f} "
              f"(from {old['reused_from']})", flush=True)
        return old
    started = time.perf_counter()
    if name == "sync":
        out = lib_arms.run_sync(recipe, args.islands, device=args.device, heldout_blocks=args.heldout_blocks,
                                eval_every=eval_every)
    else:
        out = lib_arms.run_yeto(recipe, configs[name], args.islands, device=args.device, heldout_blocks=args.heldout_blocks,
                                step_s=step_times(SETTINGS[name], args.islands), run_id=f"cmp-{name.replace('_', '-')}-{seed}",
                                flush=SETTINGS[name].flush, eval_every=eval_every)
    seconds = time.perf_counter() - started
    extra = "" if name == "sync" else f" rounds={out.stats['rounds']} goodput={out.stats['goodput']:.3f}"
    if "momentum_cos_mean" in out.stats:
        extra += (f" cos(delta,b) mean={out.stats['momentum_cos_mean']:+.2f} opposed={out.stats['momentum_opposed']:.2f}"
                  f" restarts={out.stats['momentum_restarts']}")
    print(f"seed {seed} {name} lr={lr:g} warmup={recipe.warmup_steps} ce={out.heldout_ce:.4f} tokens={out.tokens}"
          f"{extra} ({seconds:.0f}s)", flush=True)
    return {"seed": seed, "lr": lr, "warmup": recipe.warmup_steps, "heldout_ce": out.heldout_ce, "tokens": out.tokens,
            "seconds": round(seconds, 1), "stats": out.stats, "curve": out.stats.pop("curve", None)}


def tune(args, configs, sweeps, tune_seeds) -> tuple[dict[str, float], dict[str, list[dict]]]:
    """Each swept arm's lr sweep on the tuning seeds: its best lr (by mean held-out CE), and every run."""
    chosen, runs = {}, {}
    for name, lrs in sweeps.items():
        if not swept(args, name):
            chosen[name] = lrs[0]
            continue
        runs[name] = [run_arm(args, name, configs, seed, lr) for lr in lrs for seed in tune_seeds]
        sweep = {lr: [r["heldout_ce"] for r in runs[name] if r["lr"] == lr] for lr in lrs}
        chosen[name] = lc.best_lr(sweep)
        print("\n".join(lc.sweep_table(name, sweep, {lr: warmup_for(args, lr) for lr in lrs}, tune_seeds)))
        edge = (" (one lr: not a sweep)" if len(lrs) == 1 else " (at the edge of the sweep: the optimum may lie beyond it)"
                if chosen[name] in (lrs[0], lrs[-1]) else "")
        print(f"{name}_best_lr={chosen[name]:g} on tuning seeds {','.join(map(str, tune_seeds))}{edge}", flush=True)
    return chosen, runs


def main(argv=None) -> int:
    args = parse(argv)
    names, seeds, base, configs, sweeps, tune_seeds = plan(args)
    load_reused(args)
    if args.dry_run:
        print(f"islands/ranks M={args.islands}  steps={args.steps}  seeds={seeds}  device={args.device}")
        print(f"model={args.model or f'random-init Llama {args.layers}x{args.hidden} (built)'}  "
              f"data={args.data or 'synthetic order-1 Markov chat'}  micro_batch={args.micro_batch} seq_len={args.seq_len}")
        print("arm sync: M ranks, gradients averaged every step (grad_accum=M over the M shards)")
        for n in names:
            changed = {k: v for k, v in configs[n].to_dict().items() if v != SyncConfig().to_dict()[k]}
            print(f"arm {n}: step_s={step_times(SETTINGS[n], args.islands)} flush={SETTINGS[n].flush} changes={changed}"
                  f"  # {SETTINGS[n].note}")
        for name, lrs in sweeps.items():
            if swept(args, name):
                print(f"sweep {name}: lr {', '.join(f'{lr:g} (warmup {warmup_for(args, lr)})' for lr in lrs)} "
                      f"on tuning seeds {','.join(map(str, tune_seeds))}; best by mean held-out CE")
        runs = ((0 if args.tune_only else len(seeds) * (1 + len(names)))
                + sum(len(lrs) * len(tune_seeds) for n, lrs in sweeps.items() if swept(args, n)))
        print(f"runs={runs} island_steps={runs * args.islands * args.steps}")
        print("dry_run=ok")
        return 0
    import torch
    torch.set_num_threads(args.threads)
    lrs, sweep_runs = tune(args, configs, sweeps, tune_seeds)
    results: dict[str, list[dict]] = {"sync": [], **{n: [] for n in names}}
    for seed in [] if args.tune_only else seeds:
        for name in results:
            results[name].append(run_arm(args, name, configs, seed, lrs[name], args.eval_every))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "command": " ".join(["benchmarks/compare_diloco.py", *(sys.argv[1:] if argv is None else argv)]),
            "args": vars(args), "base": base.to_dict(), "tune_seeds": tune_seeds, "lrs": lrs, "sweeps": sweep_runs,
            "ci": "95% CI of the mean paired per-seed delta, Student t with n-1 df", "results": results,
            "provenance": provenance(None if argv is None else ["benchmarks/compare_diloco.py", *argv])}, indent=1))
    for name, lr in lrs.items():
        seeds_txt = f"on tuning seeds {','.join(map(str, tune_seeds))}"
        how = ("not tuned" if not swept(args, name) else f"one lr, also run {seeds_txt}" if len(sweeps[name]) == 1
               else f"best of {len(sweeps[name])} {seeds_txt}")
        print(f"{name}: lr {lr:g} ({how})")
    if args.tune_only:
        return 0
    print("Δ% is paired per seed against sync; 95% CI: Student t with n-1 df over the per-seed differences."
          + (f" Steps: first evaluated step (every {args.eval_every}) whose held-out CE <= sync's final CE"
             " at the same seed (Yeto: the syncer's global model)." if args.eval_every else ""))
    print("\n".join(lc.table(results)))
    head = "default" if "default" in names else names[0]
    print(lc.headline(head, [r["heldout_ce"] for r in results[head]], [r["heldout_ce"] for r in results["sync"]]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
