"""Diffusion learner process: `python -m yeto.learners.diffusion --run-id R --learner L --recipe recipe.json ...`.

The torch learner's command line and process contract (learners/torch/__main__.py: the same flags, progress lines,
exit 2 on a user error), so the launcher starts either by module name. One rank per island; the denoiser's LoRA
tensors go through the torch learner's sync hook (learners/torch/hook.py over learners/sync_hook.py).
"""
from __future__ import annotations

import argparse
import itertools
import logging
import sys
import time
from pathlib import Path

from yeto.learners import accel as accel_policy
from yeto.learners.diffusion import media, objective
from yeto.learners.diffusion.components import build
from yeto.learners.diffusion.loop import noise_generator, train
from yeto.learners.diffusion.recipe import DiffusionRecipe
from yeto.learners.torch import console
from yeto.learners.torch.__main__ import load_env_file, parse_args
from yeto.learners.torch.build import resolve_accel
from yeto.learners.torch.loop import StepResult

log = logging.getLogger("yeto.learner")


def load_recipe(text: str) -> DiffusionRecipe:
    return DiffusionRecipe.from_json(text if text.lstrip().startswith("{") else Path(text).read_text())


def run(args: argparse.Namespace) -> float:
    """Train this island to the recipe's end; return the final held-out denoising loss."""
    log_format = console.log_format(args.log_format)

    def emit(**fields) -> None:
        line = console.render(fields, log_format)
        print(line, flush=True)
        log.info(line)
    console.quiet()
    recipe = load_recipe(args.recipe)
    if (args.world_size or 1) > 1 or (args.rank or 0) > 0:
        raise ValueError("a diffusion island runs one rank (--gpu local:1x..., cloud:1x...): several ranks per island "
                         "are not supported yet (docs/DIFFUSION.md)")
    if not args.no_sync and args.nats_url:
        from yeto.learners.transport.logs_setup import install  # before the model is built: set-up errors too
        install(args.nats_url, run_id=args.run_id, learner=args.learner, generation=args.generation)
    accel = resolve_accel(recipe, local_rank=args.local_rank or 0, prefer=args.device)
    accel_policy.set_device(accel)
    accel_policy.configure_threads(accel, ranks_on_host=1)
    train_items, heldout_items = media.split_items(recipe)
    built = build(recipe, accel=accel)
    sync = None
    if not args.no_sync:
        from yeto.learners.torch.hook import connect_sync  # the NATS client only where it is used
        sync = connect_sync(built, recipe, args)
    start_step = max(args.start_step, recipe.start_step)
    generator = noise_generator(recipe, args.learner_index)
    batches = media.train_batches(train_items, recipe, shard=args.learner_index, num_shards=args.num_learners)
    batches = itertools.islice(batches, start_step * recipe.grad_accum, None)   # a replacement continues its shard
    heldout = [media.batch(heldout_items[i:i + recipe.micro_batch], recipe.resolution)
               for i in range(0, len(heldout_items), recipe.micro_batch)]
    eval_every, last_log = args.eval_every or recipe.eval_every, [0.0]

    def on_step(result: StepResult) -> None:
        held = objective.heldout_loss(built, heldout) if eval_every and result.step % eval_every == 0 else None
        if sync is not None:
            sync.progress(result if held is None else StepResult(**{**vars(result), "eval_loss": held}))
        if held is not None or time.monotonic() - last_log[0] >= args.log_every_s:
            last_log[0] = time.monotonic()
            emit(event="step", step=result.step, loss=round(result.loss, 5), tokens=result.tokens,
                 seconds=round(result.seconds, 4), lr=result.lr, synced=result.synced, heldout=held)

    started = time.monotonic()
    results = train(built, batches, recipe, generator=generator, sync=sync, on_step=on_step, start_step=start_step)
    held = objective.heldout_loss(built, heldout)
    emit(event="done", steps=len(results), tokens=sum(r.tokens for r in results),
         seconds=round(time.monotonic() - started, 3), heldout=held)
    if sync is not None:
        sync.close()
        emit(event="sync", **sync.stats())
    return held


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        load_env_file()
        run(args)
    except ValueError as err:
        log.error("error: %s", err)
        return 2
    return 0


if __name__ == "__main__":
    # A process of its own, and diffusion bases are never NF4 here: keep bitsandbytes out (peft imports it whenever
    # it is installed: learners/torch/quant.py keep_out_unless).
    from yeto.learners.torch import quant
    quant.keep_out_unless(False)
    sys.exit(main())
