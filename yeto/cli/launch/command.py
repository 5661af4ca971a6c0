"""`yeto launch` (validate, publish LaunchRun, detach or --wait) and `yeto down RUN [--now]`."""
from __future__ import annotations

import asyncio
import secrets
import time

from yeto.cli import join as external
from yeto.cli import trackers
from yeto.cli.autopull import pull_if_ended
from yeto.cli.common import conf, publish, run_id_arg, state_dir, url_for_run, url_or_none
from yeto.cli.launch import checks, confirm, dry_run, island_backend, limits, lineage
from yeto.cli.launch import cloud as cloud_launch
from yeto.cli.launch import diffusion as diffusion_flags
from yeto.cli.launch import recipe as recipe_flags
from yeto.cli.launch import wire as launch_wire
from yeto.cli.run_ids import known_runs, run_or_last, unknown_run
from yeto.cli.shape import add_plan_arguments
from yeto.infra.bus import connect
from yeto.schemas.base import derive_id
from yeto.schemas.codecs import CODECS
from yeto.schemas.commands import LaunchRun, StopRun
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.recipe import GLOBAL_APPLIES, MERGES, RESTARTS
from yeto.schemas.run_phase import RUN_END
from yeto.schemas.subjects import event_subject
from yeto.services.planner.estimate import plan_estimate


def register(sub) -> None:
    p = sub.add_parser("launch", help="start a fine-tuning run (detaches; --wait follows it)",
                       description="Validate everything that can be checked before renting, publish LaunchRun, "
                                   "print the run id and detach. Ctrl-C never kills a run.")
    add_plan_arguments(p)
    a = p.add_argument
    a("--gpu", help="islands: cloud:[nodes x]<count>x<gpu>[@region],... or local:<count>x<cpu|cuda>,... "
                     "(omit: the planner picks)")
    a("--data", required=True, help="HF dataset id, local jsonl/json/parquet/save_to_disk dir, or a store URI")
    a("--data-format", default="auto", help="auto, openai, sharegpt, alpaca, text, prompt-completion")
    a("--on-bad-rows", choices=("error", "skip"), default="error")
    a("--shard", choices=("auto", "ddp", "fsdp"), default="auto", help="inside an island: DDP replicas or FSDP2 shards")
    a("--activation-checkpointing", choices=("auto", "on", "off"), default="auto",
      help="recompute activations in the backward pass (auto: where the memory model says they do not fit)")
    a("--yes", "--confirm", dest="confirm", action="store_true",
      help="rent a cloud fleet (yours or the planner's) without asking; without it a cloud launch shows its plan and "
           "asks once on a terminal, and refuses elsewhere")
    a("--output", default="", help="local path, store URI (s3://, gs://, ...) or hf://org/repo (default: the run folder)")
    a("--max-steps", type=int, help="inner steps per learner")
    a("--max-tokens", type=int, help="tokens trained over all learners")
    a("--max-time", help="wall time since launch: 90s, 30m, 2h")
    a("--max-spend", type=float, help="USD, islands plus head; the run is finalized before it passes this")
    a("--local-price", type=float, default=0.0,
      help="$/hr to charge per local island (default 0: your own machine is free); makes --max-spend testable locally")
    a("--recover-timeout", default="10m", help="a lost island not back within this is dropped (default 10m)")
    a("--heartbeat-timeout", default="5m", help="the most an island that reported progress may be silent before it is "
      "replaced; sooner once its pace says so, 60s at least (default 5m; docs/LAUNCH.md, Island health)")
    a("--final-ack-timeout", default="30s", help="how long the final cut waits for every learner to acknowledge the "
      "final weights before the artifact is built without the missing ones, which the manifest names (default 30s)")
    a("--lr", type=float, help="peak inner learning rate")
    a("--lora-r", type=int, help="LoRA rank")
    a("--warmup-steps", type=int)
    a("--seed", type=int, default=0)
    a("--codec", help=f"wire codec of pushes and broadcast deltas, both ways: one of {', '.join(CODECS)} (default q4; "
      "topk2/4/8 send 2, 4 or 8 of every 64 values with error feedback: docs/PROTOCOL.md, docs/SYNC_MATH.md)")
    for flag in checks.SYNC_FLAGS:
        if flag == "merge":
            a("--merge", choices=MERGES, help="how the syncer combines the islands' deltas: rda (default with "
              "--tuning lora: the pushes' mean direction at their mean length) or avg (default with --tuning full: the "
              "token-weighted mean; with --outer-lr 1 --outer-momentum 0 --merge-alpha 0, plain averaging: "
              "docs/BENCHMARK_RESULTS.md)")
            continue
        if flag == "momentum_restart":
            a("--momentum-restart", choices=RESTARTS, help="opposed (default with --tuning lora): drop the outer momentum "
              "before a round whose merged delta points against it (adaptive restart; docs/SYNC_MATH.md); damped: scale "
              "it by 1 + cos(delta, momentum) instead; off: plain Nesterov (default with --tuning full)")
            continue
        if flag == "momentum_restart_cos":
            a("--momentum-restart-cos", type=float, help="with --momentum-restart opposed, restart only rounds whose "
              "cos(delta, momentum) is below this, in [-1, 0] (default 0: every opposed round; docs/SYNC_MATH.md)")
            continue
        if flag == "global_apply":
            a("--global-apply", choices=GLOBAL_APPLIES, help="blend (default) or rebase: a learner taking a new global "
              "keeps the steps it trained while its push was in flight (docs/SYNC_MATH.md)")
            continue
        if flag in ("codec_up", "codec_down"):
            a(f"--{flag.replace('_', '-')}", help=f"codec of {'learner pushes' if flag == 'codec_up' else 'broadcast deltas'}"
              f" (overrides --codec): one of {', '.join(CODECS)} (docs/PROTOCOL.md)")
            continue
        if flag == "feedback_decay":
            a("--feedback-decay", type=float, help="scale a learner's error-feedback residual by this before each push "
              "(default 1: nothing lost; SparseLoCo's leaky accumulator below 1; docs/SYNC_MATH.md)")
            continue
        a(f"--{flag.replace('_', '-')}", type=float if "lr" in flag or "alpha" in flag or "momentum" in flag else int)
    a("--run-id", type=run_id_arg, help="run id (default: generated)")
    a("--wait", action="store_true", help="follow the run; exit 0 when finalized, non-zero otherwise")
    cloud_launch.add_arguments(p)
    dry_run.add_arguments(p)
    external.add_launch_arguments(p)
    lineage.add_arguments(p)
    trackers.add_arguments(p)
    diffusion_flags.add_arguments(p)
    island_backend.add_arguments(p)
    recipe_flags.add_arguments(p)      # last: -c/--config, and which flags were typed (they beat the file)
    p.set_defaults(func=cmd_launch)

    d = sub.add_parser("down", help="stop a run: final cut, artifact, teardown (--now aborts)")
    d.add_argument("run", nargs="?", type=run_id_arg, help="run id")
    d.add_argument("--last", action="store_true", help="the newest run instead of RUN")
    d.add_argument("--now", action="store_true", help="abort at once: no final cut, no artifact")
    d.set_defaults(func=cmd_down)


def new_run_id() -> str:
    return f"r-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def build_launch(args, run_id: str, fleet: list[dict]) -> LaunchRun:
    from yeto.infra.model_source import resolve

    recipe_flags.apply_config(args)    # the --config file under the flags (once)
    launch_wire.refuse_unread(args)    # before the data check: a flag nothing would read is refused at once
    fleet = [*fleet, *external.slots(args)]     # --external-learners: slots after the --gpu islands
    diffusion = args.model_kind == "diffusion"     # a Diffusers pipeline and captioned images (launch/diffusion.py)
    data_check = diffusion_flags.check_media(args) if diffusion else checks.check_data(args, resolve(args.model))
    recipe_flags.apply_epochs(args, data_check, fleet)     # --epochs -> max_steps from the packed tokens
    sync = checks.sync_settings(args)
    train = checks.train_recipe(args, sync)
    train, extra = diffusion_flags.sections(args, train) if diffusion else (checks.pin_sources(train, data_check), {})
    cloud = external.on_cloud(fleet)
    recipe = launch_wire.launch_recipe(args, train=train, data_check=data_check, cloud=cloud)
    if diffusion:
        recipe = LaunchRecipe.upcast({**recipe, "model_kind": "diffusion", "diffusion": extra}).wire()
    recipe = island_backend.apply(args, recipe)
    if args.max_spend is not None and any(f["price_per_hour"] is None for f in fleet):
        raise ValueError("--max-spend needs each island's price, and the catalog has none for some --gpu entry; "
                         "pass --catalog-dir with SkyPilot's catalog, or let the planner pick the fleet")
    return LaunchRun(id=derive_id(run_id, "LaunchRun"), run_id=run_id, source="cli", fleet=fleet, recipe=recipe)


def catalog_prices(args, islands) -> list[float | None]:
    """$/hr per island from the catalog (cheapest matching offering); None where unknown. Local islands are free."""
    if all(i.cloud == "local" for i in islands):
        return [0.0] * len(islands)
    from yeto.services.planner.api import load_catalog
    try:
        offers = load_catalog(catalog_dir=args.catalog_dir, clouds=sorted({i.cloud for i in islands}))
    except Exception:  # noqa: BLE001 - no catalog here: prices stay unknown (--max-spend then refuses)
        return [None] * len(islands)
    out = []
    for i in islands:
        prices = [(o.spot_price if args.spot and o.spot_price else o.price) * i.nodes for o in offers
                  if o.cloud == i.cloud and o.gpu == i.gpu and o.count == i.count and (i.region is None or o.region == i.region)]
        out.append(min(prices) if prices else None)
    return out


async def _ended(url: str, run_id: str) -> str | None:
    """How the run ended ("finalized", "failed", "stopped"), from its events on the bus; None while it runs."""
    bus = await connect(url, name="down-check")
    try:
        for type_, phase in RUN_END.items():
            if await bus.last(event_subject(run_id, type_)) is not None:
                return phase
        return None
    finally:
        await bus.close()


async def _run_exists(url: str, run_id: str) -> bool:
    bus = await connect(url, name="launch-check")
    try:
        return await bus.last(event_subject(run_id, "RunLaunched")) is not None
    finally:
        await bus.close()


def cmd_launch(args) -> int:
    from yeto.cli.launch.plan import drop_early_zygote, zygote_early

    recipe_flags.apply_config(args, echo=True)
    early = zygote_early(args)      # the learners' imports begin now, beside the checks and the stack's start
    try:
        return launch_run(args)
    finally:
        if early:
            drop_early_zygote(args)


def launch_run(args) -> int:
    from yeto.cli.launch.plan import fleet_from_planner, local_stack_url, refuse_syncers_elsewhere

    run_id = args.run_id or new_run_id()
    launch = None
    limits.check_numbers(args)
    trackers.check_launch(args)
    if args.gpu:   # everything is checked before a stack is started or anything rented
        islands = checks.parse_fleet(args.gpu)
        limits.check_fleet_size([i.to_dict() for i in islands], args)
        checks.check_memory_fit(islands, weights_gb=args.weights_gb or checks.known_weights_gb(args.model),
                                tuning=args.tuning, base_quantization=args.base_quantization, seq_len=args.seq_len,
                                micro_batch=args.micro_batch, activation_checkpointing=args.activation_checkpointing,
                                shard=args.shard)
        fleet = checks.fleet_entries(islands, spot=args.spot, prices=catalog_prices(args, islands), local_price=args.local_price)
        if not args.dry_run:
            limits.ask_for_limit(args, fleet)
        launch = build_launch(args, run_id, fleet)
    named = conf(args).nats_url        # --nats-url / $YETO_NATS_URL: a stack the user runs
    refuse_syncers_elsewhere(args, named)
    if launch is None:                 # the planner picks: the named stack's, else planned in this process
        if args.budget is None and args.flops is None:
            raise ValueError("without --gpu the planner picks the fleet, and it needs --budget-per-hour ($/hr) or "
                             "--flops (TFLOPs); or name the fleet yourself: --gpu local:1xcpu,local:1xcpu trains two "
                             "islands on this machine")
        fleet = fleet_from_planner(args, named, run_id) if named and not args.dry_run else cloud_launch.plan_here(args)
        if fleet is None:
            return 1
        limits.check_fleet_size(fleet, args)
        if not args.dry_run:
            limits.ask_for_limit(args, fleet)
        launch = build_launch(args, run_id, fleet)
    launch, lineage_events = lineage.apply(args, launch)      # a parent mismatch is refused before anything starts
    cloud = external.on_cloud(launch.fleet)
    cloud_launch.check_head_nodes(args, rented=cloud and not named)
    if cloud and not named:            # the estimate, the plan and a move's budget count every head VM at its type's price
        launch = cloud_launch.keep_up(args, launch)      # the head's rounds: H raised, or a given H refused, before renting
        launch = cloud_launch.with_head_price(args, launch)
    if named and cloud:
        cloud_launch.refuse_loopback(named)
    estimate = plan_estimate(launch.fleet, LaunchRecipe.upcast(launch.recipe),
                             weights_gb=args.weights_gb or checks.known_weights_gb(args.model))
    if args.dry_run or cloud:          # the plan before money is spent, and the one question (--yes answers it)
        print(dry_run.render(args, launch, estimate, cloud=cloud), flush=True)
        if args.dry_run:
            print("dry run: nothing was started, rented or written; drop --dry-run to launch")
            return 0
        if not confirm.rent_or_not(args, f"Rent {'the islands' if named else 'the head VM and the islands'} above?"):
            print("not launched")
            return 1
    elif estimate:
        print(estimate.render())
    if cloud and not named:
        confirm.start_sky_server()      # detached from this terminal before SkyPilot's first call would start it
        url, launch = cloud_launch.run_on_head(args, launch, lineage_events)      # the run's own head VM, then the run on it
    else:
        if named and cloud:
            launch = launch.model_copy(update={"recipe": LaunchRecipe.upcast(launch.recipe).updated(bus_url=named).wire()})
        url = url_or_none(args) or local_stack_url(args)
        if asyncio.run(_run_exists(url, run_id)):
            raise ValueError(f"run {run_id} exists already; pick another --run-id")
        asyncio.run(publish(url, *checks.data_events(launch), *lineage_events, launch))
    print(f"launched {run_id}: {len(launch.fleet)} island(s)\n  follow: yeto status {run_id} | yeto logs {run_id} --follow\n"
          f"  stop:   yeto down {run_id}   (abort: yeto down {run_id} --now)")
    external.print_tokens(args, run_id, launch.fleet)
    return trackers.wait(args, url, run_id, then=lambda: pull_if_ended(state_dir(args), run_id)) if args.wait else 0


def cmd_down(args) -> int:
    args.run = run_or_last(args)
    url = url_for_run(args, args.run)
    if url is None:
        raise ValueError(f"no stack is running under {conf(args).state_dir}; nothing to stop")
    # a typo must not read as success; the bus answers for a run launched an instant ago (the tape may lag)
    if args.run not in (known := known_runs(args)) and not asyncio.run(_run_exists(url, args.run)):
        raise unknown_run(args, args.run, known)
    ended = asyncio.run(_ended(url, args.run))
    # Sent even to an ended run: a stop is idempotent, and what may still be up (a cloud run's head, lingering for its
    # copy-back) is torn down by it.
    msg = StopRun(id=derive_id(args.run, "StopRun", args.now, time.time()), run_id=args.run, source="cli", now=args.now)
    asyncio.run(publish(url, msg))
    if ended:
        print(f"{args.run} has already ended ({ended}): nothing left to train or cut; whatever of it is still up is "
              f"torn down")
    else:
        print(f"{'abort' if args.now else 'graceful stop (final cut, artifact, teardown)'} requested for {args.run}")
    return 0
