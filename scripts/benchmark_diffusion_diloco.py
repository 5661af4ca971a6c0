"""Diffusion quality against synchronous training on equal hardware: the contract (docs/DIFFUSION_BENCHMARK.md).

The arms, metrics and media controls are fixed here and printed by --dry-run; the diffusion learner
backend is a later issue, so a real run stops with a clear message instead of measuring something else.

    .venv/bin/python scripts/benchmark_diffusion_diloco.py --model Lightricks/LTX-Video --data <media-dataset> \
        --height 512 --width 512 --settings all --dry-run
Last line: `dry_run=ok` (a real run, once built: `default_delta_pct=<mean Δ% of validation loss vs sync>`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from lib_compare import SETTINGS, pick

METRICS = ("validation denoising loss at fixed timesteps (mean over a fixed grid of t, fixed noise seeds)",
           "Δ% against sync at the same seed (paired), mean ± sd and [min, max] over seeds",
           "bytes on the wire per learner, up and down", "goodput: tokens(latents) merged / computed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Diffusers model id or directory (e.g. Lightricks/LTX-Video)")
    ap.add_argument("--data", required=True, help="media folder with metadata.jsonl, or a table with file_name/text")
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--frames", type=int, default=1, help="video frames per sample (1: images)")
    ap.add_argument("--settings", default="default,direct", help=f"all, or some of: {', '.join(SETTINGS)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    try:
        names = pick(args.settings)
        if min(args.height, args.width, args.frames, args.islands, args.steps) < 1 or args.height % 8 or args.width % 8:
            raise ValueError("height and width must be positive multiples of 8; frames, islands, steps >= 1")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shape = f"{args.frames}x{args.height}x{args.width}"
    print(f"model={args.model} data={args.data} media={shape} (fixed: no resizing per sample, center crop)")
    print(f"islands/ranks M={args.islands} steps={args.steps} seeds={args.seeds} tuning=lora")
    print("arm sync: M ranks, gradients averaged every step, same media order, timesteps and noise seeds")
    for n in names:
        print(f"arm {n}: {SETTINGS[n].sync or 'recipe defaults'}  # {SETTINGS[n].note}")
    for m in METRICS:
        print(f"metric: {m}")
    if not args.dry_run:
        print("error: the diffusion learner backend is not built yet (its own issue); only --dry-run works today",
              file=sys.stderr)
        return 2
    print("dry_run=ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
