"""MLX learner entry point: `python -m yeto.learners.mlx --run-id R --learner L --recipe recipe.json ...`.

The torch learner's process contract (learners/torch/__main__.py): the same flags (rank and rendezvous flags are
accepted; an MLX island is one process), the same recipe, the same stdout lines, the same exit status 2 with an
`error: ...` line for a user error. The step boundary is learners/sync_hook.py's DilocoHook over MlxArrays and
learners/bus_client.py's NATS transport; `--no-sync` trains locally with no NATS.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from itertools import islice
from pathlib import Path

from yeto.learners.torch import console
from yeto.learners.torch.recipe import TrainRecipe

log = logging.getLogger("yeto.learner")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m yeto.learners.mlx", description=__doc__.splitlines()[0])
    p.add_argument("--run-id", required=True)
    p.add_argument("--learner", required=True, help="learner (island) id")
    p.add_argument("--generation", type=int, default=0, help="incarnation of this learner (bumped on replacement)")
    p.add_argument("--nats-url", default=None, help="the stack's NATS URL (not needed with --no-sync)")
    p.add_argument("--recipe", required=True, help="recipe JSON file, or the JSON itself")
    p.add_argument("--learner-index", type=int, default=0, help="this island's data shard")
    p.add_argument("--num-learners", type=int, default=1, help="islands sharing the data")
    p.add_argument("--start-step", type=int, default=0, help="resume at this inner step and data position")
    for flag in ("--rank", "--world-size", "--local-rank", "--master-port"):
        p.add_argument(flag, type=int, default=None, help="accepted for the torch contract; an MLX island is one rank")
    p.add_argument("--master-addr", default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", choices=("gpu", "cpu", "cuda"), default=None, help="MLX device (default: MLX's, the "
                   "Metal GPU on Apple silicon, the CPU elsewhere; cuda is read as gpu)")
    p.add_argument("--no-sync", action="store_true", help="train locally, without NATS and without DiLoCo")
    p.add_argument("--eval-every", type=int, default=0, help="held-out evaluation every N steps (default: the recipe's)")
    p.add_argument("--log-every-s", type=float, default=2.0, help="minimum seconds between progress lines")
    p.add_argument("--log-format", choices=console.FORMATS, default=None, help="progress lines: text or json")
    return p.parse_args(argv)


def emit(fmt: str, **fields) -> None:
    line = console.render(fields, fmt)
    print(line, flush=True)
    log.info(line)


def run(args: argparse.Namespace) -> float:
    """Train to the recipe's end; return the final held-out loss."""
    fmt = console.log_format(args.log_format)
    console.quiet()
    text = args.recipe if args.recipe.lstrip().startswith("{") else Path(args.recipe).read_text()
    recipe = TrainRecipe.from_json(text)
    if (args.world_size or 1) > 1:
        raise ValueError("an MLX island is one process: give it count 1 (--world-size 1)")
    if not args.no_sync and args.nats_url:
        from yeto.learners.transport.logs_setup import install
        install(args.nats_url, run_id=args.run_id, learner=args.learner, generation=args.generation)
    from yeto.learners.mlx import batches
    from yeto.learners.mlx.build import build, connect_sync
    from yeto.learners.mlx.loop import evaluate, train
    model, tokenizer = build(recipe, device=args.device)
    hook = None if args.no_sync else connect_sync(model, recipe, args)
    start_step = max(args.start_step, recipe.start_step)
    stream = batches.train_batches(recipe, tokenizer, shard=args.learner_index, num_shards=args.num_learners)
    stream = islice(stream, start_step * recipe.grad_accum, None)
    heldout = batches.heldout_batches(recipe, tokenizer)
    eval_every, last_log = args.eval_every or recipe.eval_every, [0.0]

    def on_step(result) -> None:
        held = evaluate(model, heldout) if eval_every and result.step % eval_every == 0 and heldout else None
        if hook is not None:
            hook.progress(result if held is None else result.__class__(**{**result.__dict__, "eval_loss": held}))
        if held is not None or time.monotonic() - last_log[0] >= args.log_every_s:
            last_log[0] = time.monotonic()
            emit(fmt, event="step", step=result.step, loss=round(result.loss, 5), tokens=result.tokens,
                 seconds=round(result.seconds, 4), lr=result.lr, synced=result.synced, heldout=held)

    started = time.monotonic()
    results = train(model, stream, recipe, sync=hook, on_step=on_step, start_step=start_step)
    held = evaluate(model, heldout) if heldout else float("nan")
    emit(fmt, event="done", steps=len(results), tokens=sum(r.tokens for r in results),
         seconds=round(time.monotonic() - started, 3), heldout=held)
    if hook is not None:
        hook.close()
        emit(fmt, event="sync", **hook.stats())
    return held


def main(argv: list[str] | None = None) -> int:
    try:
        run(parse_args(argv))
    except ValueError as err:
        log.error("error: %s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
