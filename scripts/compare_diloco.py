"""Quality of Yeto's islands against synchronous data parallelism on equal hardware, tokens, data order and seeds.

Arms (docs/LM_BENCHMARK.md): `sync` (M ranks averaging gradients every step) and Yeto settings
(benchmarks/lib_compare.py SETTINGS: the default recipe and variants) with M islands through the real
DilocoHook/DilocoSync and SyncerCore. Quality = held-out masked cross-entropy of the model exported
from the syncer's f32 state, per seed; the table gives Δ% against `sync` at the same seed.

    .venv/bin/python scripts/compare_diloco.py --settings all --dry-run
    .venv/bin/python scripts/compare_diloco.py --settings default,direct --seeds 0,1,2
    .venv/bin/python scripts/compare_diloco.py --model smollm2-135m --data examples/data/chat_demo.jsonl \
        --tuning lora --lr 3e-4 --steps 480 --micro-batch 8 --seq-len 512 --device cuda
Without --model/--data it builds a random-init Llama (--layers, --hidden) and a synthetic order-2 Markov
chat corpus with a known entropy floor (benchmarks/lib_task.py). The last line is
`default_delta_pct=<mean Δ% of the default recipe against sync>` (or of the first Yeto setting run).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from lib_compare import SETTINGS, parse_overrides, pick, spread, step_times, table

from yeto.schemas.recipe import SyncConfig


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="model alias, HF id, directory or .gguf (default: a random-init Llama built here)")
    ap.add_argument("--data", help="chat JSONL / dataset (default: the synthetic Markov chat corpus)")
    ap.add_argument("--tuning", choices=("full", "lora"), help="default: full for the built model, lora otherwise")
    ap.add_argument("--settings", default="default,direct", help=f"all, or some of: {', '.join(SETTINGS)}")
    ap.add_argument("--recipe", action="append", default=[], metavar="KEY=VALUE",
                    help="change the base SyncConfig of every Yeto arm (e.g. outer_lr=1.0); repeatable")
    ap.add_argument("--seeds", default="0,1,2")
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
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    return ap.parse_args(argv)


def plan(args):
    """Validated pieces: settings, seeds, base sync config (raises ValueError on bad flags)."""
    names = pick(args.settings)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds or args.islands < 1 or args.steps < 1:
        raise ValueError("need at least one seed, one island and one step")
    base = SyncConfig.from_dict({**SyncConfig().to_dict(), **parse_overrides(args.recipe)})
    configs = {n: SyncConfig.from_dict({**base.to_dict(), **SETTINGS[n].sync}) for n in names}
    return names, seeds, base, configs


def recipe_for(args, seed: int):
    import lib_task

    from yeto.learners.torch.recipe import TrainRecipe
    work = Path(args.workdir)
    model = args.model or str(lib_task.write_tiny_model(work / f"model-l{args.layers}-h{args.hidden}-s{seed}",
                                                        layers=args.layers, hidden=args.hidden, seed=seed))
    data = args.data or str(lib_task.write_markov_chat(work / "markov.jsonl"))
    tuning = args.tuning or ("lora" if args.model else "full")
    return TrainRecipe(model=model, data=data, tuning=tuning, lr=args.lr, warmup_steps=args.warmup, max_steps=args.steps,
                       micro_batch=args.micro_batch, seq_len=args.seq_len, seed=seed, heldout_fraction=0.05)


def main(argv=None) -> int:
    args = parse(argv)
    names, seeds, base, configs = plan(args)
    if args.dry_run:
        print(f"islands/ranks M={args.islands}  steps={args.steps}  seeds={seeds}  device={args.device}")
        print(f"model={args.model or f'random-init Llama {args.layers}x{args.hidden} (built)'}  "
              f"data={args.data or 'synthetic order-2 Markov chat'}  micro_batch={args.micro_batch} seq_len={args.seq_len}")
        print("arm sync: M ranks, gradients averaged every step (grad_accum=M over the M shards)")
        for n in names:
            changed = {k: v for k, v in configs[n].to_dict().items() if v != SyncConfig().to_dict()[k]}
            print(f"arm {n}: step_s={step_times(SETTINGS[n], args.islands)} flush={SETTINGS[n].flush} changes={changed}"
                  f"  # {SETTINGS[n].note}")
        print(f"runs={len(seeds) * (1 + len(names))} island_steps={len(seeds) * (1 + len(names)) * args.islands * args.steps}")
        print("dry_run=ok")
        return 0
    import lib_arms
    import torch
    torch.set_num_threads(args.threads)
    results: dict[str, list[dict]] = {"sync": [], **{n: [] for n in names}}
    for seed in seeds:
        recipe = recipe_for(args, seed)
        started = time.perf_counter()
        out = lib_arms.run_sync(recipe, args.islands, device=args.device, heldout_blocks=args.heldout_blocks)
        results["sync"].append({"seed": seed, "heldout_ce": out.heldout_ce, "tokens": out.tokens, "stats": out.stats})
        print(f"seed {seed} sync ce={out.heldout_ce:.4f} tokens={out.tokens} ({time.perf_counter() - started:.0f}s)", flush=True)
        for n in names:
            started = time.perf_counter()
            out = lib_arms.run_yeto(recipe, configs[n], args.islands, device=args.device, heldout_blocks=args.heldout_blocks,
                                    step_s=step_times(SETTINGS[n], args.islands), run_id=f"cmp-{n}-{seed}",
                                    flush=SETTINGS[n].flush)
            results[n].append({"seed": seed, "heldout_ce": out.heldout_ce, "tokens": out.tokens, "stats": out.stats})
            print(f"seed {seed} {n} ce={out.heldout_ce:.4f} tokens={out.tokens} rounds={out.stats['rounds']} "
                  f"goodput={out.stats['goodput']:.3f} ({time.perf_counter() - started:.0f}s)", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "base": base.to_dict(), "results": results}, indent=1))
    print("\n".join(table(results)))
    head = "default" if "default" in names else names[0]
    d = [100 * (a["heldout_ce"] - s["heldout_ce"]) / s["heldout_ce"] for a, s in zip(results[head], results["sync"])]
    mean, sd = spread(d)
    print(f"{head}_delta_pct={mean:+.3f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
