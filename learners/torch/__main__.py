"""Learner process entry point: `python -m yeto.learners.torch --run-id R --learner L --recipe recipe.json ...`.

One process per rank of an island. Rank 0 talks to the syncer through the sync hook (built by
learners/torch/hook.py over learners/bus_client.py); `--no-sync` trains locally with no NATS at all.
Progress goes to stdout, one line per event: readable, or JSON with --log-format json (learners/torch/console.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import os
import sys
import time
from pathlib import Path

from yeto.learners import accel as accel_policy
from yeto.learners.torch import console, dist, shards
from yeto.learners.torch.batches import heldout_batches, train_batches
from yeto.learners.torch.build import build, resolve_accel
from yeto.learners.torch.evaluate import evaluate
from yeto.learners.torch.loop import StepResult, train
from yeto.learners.torch.recipe import TrainRecipe
from yeto.learners.torch.tuning import trainable_parameters

log = logging.getLogger("yeto.learner")   # with sync, its lines go to the run's log stream too (`yeto logs`)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m yeto.learners.torch", description=__doc__.splitlines()[0])
    p.add_argument("--run-id", required=True)
    p.add_argument("--learner", required=True, help="learner (island) id")
    p.add_argument("--generation", type=int, default=0, help="incarnation of this learner (bumped on replacement)")
    p.add_argument("--nats-url", default=None, help="the stack's NATS URL (not needed with --no-sync)")
    p.add_argument("--recipe", required=True, help="recipe JSON file, or the JSON itself")
    p.add_argument("--learner-index", type=int, default=0, help="this island's data shard group")
    p.add_argument("--num-learners", type=int, default=1, help="islands sharing the data")
    p.add_argument("--start-step", type=int, default=0, help="resume at this inner step, and at the matching place "
                   "in this learner's data shard (a replacement continues its predecessor)")
    p.add_argument("--rank", type=int, default=None, help="rank in the island (default $RANK or 0)")
    p.add_argument("--world-size", type=int, default=None, help="ranks in the island (default $WORLD_SIZE or 1)")
    p.add_argument("--local-rank", type=int, default=None, help="rank on this host (default $LOCAL_RANK)")
    p.add_argument("--master-addr", default=None, help="rank 0's host (default $MASTER_ADDR or 127.0.0.1)")
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port (default $MASTER_PORT or 29500)")
    p.add_argument("--device", choices=accel_policy.KINDS, default=None, help="force a device kind")
    p.add_argument("--no-sync", action="store_true", help="train locally, without NATS and without DiLoCo")
    p.add_argument("--eval-every", type=int, default=0, help="held-out evaluation every N steps (default: the recipe's "
                   "eval_every; 0 there: at the end)")
    p.add_argument("--log-every-s", type=float, default=2.0, help="minimum seconds between progress lines")
    p.add_argument("--log-format", choices=console.FORMATS, default=None, help="progress lines: text (default) or "
                   "json, one object per line for machines (default $YETO_LOG_FORMAT, else text)")
    return p.parse_args(argv)


def load_recipe(text: str) -> TrainRecipe:
    return TrainRecipe.from_json(text if text.lstrip().startswith("{") else Path(text).read_text())


def load_env_file() -> None:
    """$YETO_ENV_FILE: a cloud island's secrets (HF_TOKEN, ...), a file mount of a JSON object of names to strings."""
    if name := os.environ.get("YETO_ENV_FILE"):
        try:
            os.environ.update({str(k): str(v) for k, v in json.loads(Path(name).expanduser().read_text()).items()})
        except (OSError, ValueError, AttributeError) as e:
            raise ValueError(f"$YETO_ENV_FILE={name}: not a JSON object of names to strings ({type(e).__name__})") from None


LOG_FORMAT = ["text"]      # run() sets it from --log-format / $YETO_LOG_FORMAT


def emit(**fields) -> None:
    line = console.render(fields, LOG_FORMAT[0])
    print(line, flush=True)
    log.info(line)


def run(args: argparse.Namespace) -> float:
    """Train one rank to the recipe's end; return the final held-out loss (rank 0; NaN elsewhere)."""
    LOG_FORMAT[0] = console.log_format(args.log_format)
    console.quiet()
    recipe = load_recipe(args.recipe)
    topology = dist.Topology.from_env(rank=args.rank, world_size=args.world_size, local_rank=args.local_rank,
                                      master_addr=args.master_addr, master_port=args.master_port)
    if not args.no_sync and topology.rank == 0 and args.nats_url:
        from yeto.learners.transport.logs_setup import install  # before the model is built: set-up errors too
        install(args.nats_url, run_id=args.run_id, learner=args.learner, generation=args.generation)
    accel = resolve_accel(recipe, local_rank=topology.local_rank, prefer=args.device)
    accel_policy.set_device(accel)
    accel_policy.configure_threads(accel, ranks_on_host=topology.world_size)
    dist.init(topology, accel)
    try:
        built = build(recipe, accel=accel, topology=topology)
        sync, params = None, trainable_parameters(built.model)
        if not args.no_sync:    # on rank 0; FSDP2's other ranks serve the gathers its initial values need

            def connect():
                from yeto.learners.torch.hook import connect_sync  # the NATS client only where it is used
                return connect_sync(built, recipe, args)
            sync = shards.on_rank0(connect, params, rank=topology.rank, sharded=built.sharded)
        batches = train_batches(recipe, built.tokenizer, shard=args.learner_index * topology.world_size + topology.rank,
                                num_shards=args.num_learners * topology.world_size)
        # A replacement continues its predecessor: same shard order, past the micro-batches already trained on.
        start_step = max(args.start_step, recipe.start_step)    # a replacement's, or a resumed lineage's
        batches = itertools.islice(batches, start_step * recipe.grad_accum, None)
        # DDP replicas evaluate on rank 0 alone, unwrapped (no collectives); FSDP2 shards need every rank.
        evaluates = topology.rank == 0 or built.sharded
        eval_model = built.wrapped if built.sharded else built.model
        heldout = heldout_batches(recipe, built.tokenizer) if evaluates else []
        last_log = [0.0]
        eval_every = args.eval_every or recipe.eval_every

        def on_step(result: StepResult) -> None:
            held = None
            if eval_every and result.step % eval_every == 0 and heldout:
                held = evaluate(eval_model, heldout, accel=accel)
            if topology.rank != 0:
                return
            if sync is not None:     # an evaluated step is reported at once, its eval loss on the tape
                sync.progress(result if held is None else dataclasses.replace(result, eval_loss=held))
            if held is not None or time.monotonic() - last_log[0] >= args.log_every_s:
                last_log[0] = time.monotonic()
                emit(event="step", step=result.step, loss=round(result.loss, 5), tokens=result.tokens,
                     seconds=round(result.seconds, 4), lr=result.lr, synced=result.synced, heldout=held)

        started = time.monotonic()
        results = train(built.model, batches, recipe, accel=accel, topology=topology, sync=sync,
                        on_step=on_step, wrapped=built.wrapped, start_step=start_step)
        elapsed = time.monotonic() - started
        # The last pushes go out before the final evaluation: an evaluation of many seconds sends no chunk, and a
        # learner silent that long stops counting as live (services/syncer/liveness.py), so its peers' last pushes
        # would merge without its own. FSDP2: the last pushes gather fragments from every rank.
        if not args.no_sync:
            shards.on_rank0(sync and sync.close, params, rank=topology.rank, sharded=built.sharded)
        held = evaluate(eval_model, heldout, accel=accel) if heldout else float("nan")
        if topology.rank == 0:
            emit(event="done", steps=len(results), tokens=sum(r.tokens for r in results),
                 seconds=round(elapsed, 3), heldout=held)
        if sync is not None:
            emit(event="sync", **sync.stats())
        return held
    finally:
        dist.shutdown()


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        load_env_file()     # before anything reads the environment (the Hub's token)
        run(args)
    except ValueError as err:
        log.error("error: %s", err)   # to stderr as before (logging's last resort, or install's), and the bus
        return 2
    return 0


def needs_bitsandbytes(argv: list[str]) -> bool:
    """Whether this learner's recipe quantizes its base (NF4); True when the arguments do not parse (main says why)."""
    import contextlib
    import io
    try:
        with contextlib.redirect_stderr(io.StringIO()):      # main parses again and reports
            return load_recipe(parse_args(argv).recipe).base_quantization == "nf4"
    except (Exception, SystemExit):  # noqa: BLE001 - any doubt keeps it importable; main reports a bad recipe
        return True


if __name__ == "__main__":
    # A process of its own: keeping bitsandbytes out here cannot reach a test's or another caller's interpreter.
    from yeto.learners.torch import quant
    quant.keep_out_unless(needs_bitsandbytes(sys.argv[1:]))
    sys.exit(main())
