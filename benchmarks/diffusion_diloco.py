"""Diffusion quality against synchronous training on equal hardware: held-out denoising loss (docs/DIFFUSION.md).

Arms: `sync` (M ranks averaging gradients every step) and Yeto settings (benchmarks/lib_compare.py SETTINGS) with M
islands of the real diffusion loop through the real DilocoHook/DilocoSync and SyncerCore, in process over a simulated
network (benchmarks/lib_diffusion_arms.py). With --model a family name (sd, sd3, flux, ltx-video, wan) or none it builds that
tiny random-init pipeline and captioned coloured squares, or moving squares as clips for a video family
(learners/diffusion/tiny.py, tiny_dit.py), so it runs on a CPU in minutes:

    .venv/bin/python benchmarks/diffusion_diloco.py --height 16 --width 16 --steps 60 --seeds 0,1,2
    .venv/bin/python benchmarks/diffusion_diloco.py --model ltx-video --frames 9 --height 32 --width 32 --steps 60
    .venv/bin/python benchmarks/diffusion_diloco.py --model <pipeline> --data <images> --height 512 \
        --width 512 --steps 500 --device cuda --dry-run
Last lines: `default_ratio=<mean held-out loss ratio Yeto / sync>` and `default_delta_pct=<mean Δ%>` (or of the
first Yeto setting run); `dry_run=ok` for a dry run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lib_compare import SETTINGS, pick, spread, step_times

TINY = ("sd", "sd3", "flux", "ltx-video", "wan")
VIDEO = ("ltx-video", "wan")     # families whose tiny pipeline the benchmark builds (learners/diffusion/families.py)

METRICS = ("held-out denoising loss of the final LoRA at a fixed grid of timesteps with fixed noise",
           "Yeto / sync ratio and Δ% against sync at the same seed (paired), mean ± sd over seeds",
           "bytes on the wire per run, up and down; merged rounds")


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="sd", help=f"a Diffusers pipeline folder, or a family ({', '.join(TINY)}) whose "
                                                  "tiny random-init pipeline is built here (default sd)")
    ap.add_argument("--data", help="images or clips with metadata.jsonl (default: captioned coloured squares built "
                                   "here, moving ones as clips with --frames above 1)")
    ap.add_argument("--height", type=int, default=16)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--frames", type=int, default=1, help="video frames per sample (1: images)")
    ap.add_argument("--settings", default="default", help=f"all, or some of: {', '.join(SETTINGS)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--sync-every", type=int, default=8, help="inner steps between pushes of a fragment")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--workdir", default="/tmp/yeto-diffusion-bench")
    ap.add_argument("--dry-run", action="store_true")
    return ap.parse_args(argv)


def check(args) -> list[str]:
    names = pick(args.settings)
    if min(args.height, args.width, args.frames, args.islands, args.steps) < 1 or args.height % 8 or args.width % 8:
        raise ValueError("height and width must be positive multiples of 8; frames, islands, steps >= 1")
    if args.model in TINY and (args.frames > 1) != (args.model in VIDEO):
        raise ValueError(f"--model {args.model} --frames {args.frames}: ltx-video and wan take clips (--frames 9), "
                         "sd, sd3 and flux images (--frames 1)")
    return names


def recipe_for(args, seed: int):
    from yeto.learners.diffusion.api import DiffusionRecipe, write_tiny_clips, write_tiny_images, write_tiny_pipeline
    work, family = Path(args.workdir), args.model
    model = str(work / f"{family}-s{seed}" if (work / f"{family}-s{seed}").is_dir()
                else write_tiny_pipeline(work / f"{family}-s{seed}", seed=seed, family=family)) if family in TINY else family
    clips = args.frames > 1
    media = work / (f"clips-{args.frames}x{args.height}x{args.width}" if clips else f"images-{args.height}")
    data = args.data or str(media if (media / "metadata.jsonl").is_file()
                            else write_tiny_clips(media, num_clips=40, frames=args.frames + 3, size=max(args.height, args.width))
                            if clips else write_tiny_images(media, num_images=80, size=args.height))
    return DiffusionRecipe(model=model, data=data, resolution=args.height, height=args.height, width=args.width,
                           frames=args.frames, max_steps=args.steps, lr=args.lr,
                           warmup_steps=2, schedule="constant", micro_batch=args.micro_batch, seed=seed,
                           heldout_fraction=0.2)


def main(argv=None) -> int:
    args = parse(argv)
    try:
        names = check(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    built = "moving squares (built)" if args.frames > 1 else "coloured squares (built)"
    model = f"tiny random-init {args.model} (built)" if args.model in TINY else args.model
    print(f"model={model} data={args.data or built} "
          f"media={args.frames}x{args.height}x{args.width} (resized, center-cropped)")
    print(f"islands/ranks M={args.islands} steps={args.steps} seeds={args.seeds} tuning=lora device={args.device}")
    print("arm sync: M ranks, gradients averaged every step (grad_accum=M over the M image shards)")
    for n in names:
        print(f"arm {n}: {SETTINGS[n].sync or 'recipe defaults'}  # {SETTINGS[n].note}")
    for m in METRICS:
        print(f"metric: {m}")
    if args.dry_run:
        print("dry_run=ok")
        return 0
    import lib_diffusion_arms as arms
    import torch

    from yeto.schemas.recipe import SyncConfig
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    losses: dict[str, list[float]] = {"sync": [], **{n: [] for n in names}}
    for seed in seeds:
        recipe, started = recipe_for(args, seed), time.perf_counter()
        out = arms.run_sync(recipe, args.islands, args.device)
        losses["sync"].append(out.heldout)
        print(f"seed {seed} sync heldout={out.heldout:.5f} images={out.images} ({time.perf_counter() - started:.0f}s)",
              flush=True)
        for n in names:
            started = time.perf_counter()
            sync = SyncConfig.from_dict({"inner_steps": args.sync_every, **SETTINGS[n].sync})
            out = arms.run_yeto(recipe, sync, args.islands, args.device, step_s=step_times(SETTINGS[n], args.islands),
                                run_id=f"diff-{n}-{seed}")
            losses[n].append(out.heldout)
            print(f"seed {seed} {n} heldout={out.heldout:.5f} images={out.images} rounds={out.stats['rounds']} "
                  f"bytes_up={out.stats['bytes_up']} bytes_down={out.stats['bytes_down']} "
                  f"({time.perf_counter() - started:.0f}s)", flush=True)
    head = names[0] if "default" not in names else "default"
    ratios = [a / s for a, s in zip(losses[head], losses["sync"])]
    for n in names:
        mean, sd = spread([100 * (a / s - 1) for a, s in zip(losses[n], losses["sync"])])
        print(f"{n}: sync {spread(losses['sync'])[0]:.5f}  yeto {spread(losses[n])[0]:.5f}  Δ% {mean:+.2f} ± {sd:.2f}")
    print(f"{head}_ratio={spread(ratios)[0]:.4f}")
    print(f"{head}_delta_pct={100 * (spread(ratios)[0] - 1):+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
