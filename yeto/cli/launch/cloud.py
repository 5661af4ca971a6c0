"""`yeto launch` with cloud islands and no --nats-url: the run's own head VM first (infra/head/records.py records it), then
the run published on it. Once the head has the run it owns the teardown, so this CLI may exit or crash freely."""
from __future__ import annotations

import asyncio
import ipaddress
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from yeto.cli.common import publish, state_dir
from yeto.cli.launch import checks
from yeto.infra.head import records as heads
from yeto.infra.head.data import ship_data, ship_model, ship_parent
from yeto.schemas.head_size import HeadChoice, choose_head, head_nodes_line, trainable_of
from yeto.schemas.head_size import check_head_nodes as check_head_nodes_size
from yeto.schemas.head_throughput import HeadSize, inner_steps_to_fit, lag_refusal
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.recipe import SyncConfig
from yeto.services.launcher.api import launch_head, take_down


def add_arguments(p) -> None:
    a = p.add_argument
    a("--env-from-host", action="append", default=[], metavar="NAME",
      help="give the islands this environment variable's value from this shell (repeat; HF_TOKEN goes when set); "
           "it travels as a 0600 file, never on a command line, the tape or in logs")
    a("--head-cloud", help="cloud of the run's head VM (default: SkyPilot's cheapest CPU VM that fits)")
    a("--head-region", help="region of the head VM (with --head-cloud)")


def check_head_nodes(args, rented: bool) -> None:
    """--head-nodes is a size the head can have, and names a head this launch rents (refused otherwise, not ignored)."""
    check_head_nodes_size(args.head_nodes)
    if args.head_nodes > 1 and not rented:
        raise ValueError(f"--head-nodes {args.head_nodes}: this launch rents no head (its islands are local, or "
                         f"--nats-url names a stack); a head over several VMs is for cloud islands without --nats-url")


def refuse_loopback(url: str) -> None:
    """Cloud islands must reach the stack over the network: a URL on this machine's loopback cannot serve them."""
    for part in url.split(","):
        host = urlsplit(part.strip() if "://" in part else f"nats://{part.strip()}").hostname or ""
        try:
            ip = ipaddress.ip_address(host)
            local = ip.is_loopback or ip.is_unspecified
        except ValueError:
            local = host == "localhost" or host.endswith(".localhost")
        if local:
            raise ValueError(f"--nats-url {url}: cloud islands cannot reach {host} (this machine's loopback); "
                             f"omit --nats-url and `yeto launch` starts a head VM for the run, or give the head's public address")


def plan_here(args) -> list[dict] | None:
    """Without a stack to ask, the planner runs in this process (as `yeto shape` does); the fleet, or None."""
    from yeto.cli.common import conf
    from yeto.cli.launch.plan import fleet_from_answer
    from yeto.cli.shape import plan_from_args

    plan = plan_from_args(args)
    answer = {"type": "FleetPlanned", "plan": plan.to_dict()} if plan.feasible else {"type": "FleetPlanFailed",
                                                                                       "reason": plan.reason}
    return fleet_from_answer(args, answer, own_head=not conf(args).nats_url)


def ship(state, launch):
    """A local --data and --model go with the head (its launcher mounts them on the islands), and a parent
    artifact too (its syncer seeds from it): the recipe names each at its head-side path. The pins, taken here
    before, name files relative to the folder, so the islands check the copies against them."""
    run_id, recipe = launch.run_id, LaunchRecipe.upcast(launch.recipe)
    train: dict = {"data": ship_data(state, run_id, recipe.train.data), "model": ship_model(state, run_id, recipe.train.model)}
    if seed := recipe.train.sync.seed:
        train["sync"] = {**recipe.train.sync.model_dump(), "seed": ship_parent(state, run_id, Path(seed))}
    return launch.model_copy(update={"recipe": recipe.updated(train=train).wire()})


def size_head(args, launch) -> HeadChoice | None:
    """The head VM holding the run's syncer (schemas/head_size.py) with the cores its rounds need (head_rounds), None
    when the model's size is unknown here; HeadTooSmall, saying the numbers and what to do, when no head type does."""
    weights = args.weights_gb or checks.known_weights_gb(args.model)
    if weights is None:
        return None
    sync = LaunchRecipe.upcast(launch.recipe).train.sync.config()
    rounds = head_rounds(args, launch)
    return choose_head(trainable_of(weights, args.tuning), num_learners=len(launch.fleet), sync=sync,
                       num_syncers=args.syncers or 1, memory_gb=args.head_memory_gb,
                       cores=rounds.total_cores if rounds is not None else 0)


def head_rounds(args, launch) -> HeadSize | None:
    """The head's rounds against the fleet's interval (services/planner/estimate.py `fleet_rounds`: the numbers `yeto
    shape` and the ETA use); None when the model's size is unknown here or an island is local."""
    from yeto.services.planner.estimate import fleet_rounds

    weights = args.weights_gb or checks.known_weights_gb(args.model)
    if weights is None or not launch.fleet or any(i.get("cloud") == "local" for i in launch.fleet):
        return None
    train = LaunchRecipe.upcast(launch.recipe).train
    return fleet_rounds(weights, train.tuning, train.tokens_per_step, launch.fleet, train.sync.config())


def keep_up(args, launch):
    """A cloud fleet named with --gpu against the head's rounds, before anything is rented: where no head keeps up at
    the default H, the run syncs every H' inner steps, the fewest at which the largest head does (said in one line);
    an H given (--sync-every, or a config file) at which none does is refused with the numbers and the H that fits."""
    rounds = head_rounds(args, launch)
    if rounds is None or rounds.fits:
        return launch
    recipe = LaunchRecipe.upcast(launch.recipe)
    h = recipe.train.sync.inner_steps
    if getattr(args, "sync_every", None) is not None or h != SyncConfig.inner_steps:
        raise ValueError(lag_refusal(rounds, h, "name"))
    needed = inner_steps_to_fit(rounds, h)
    print(f"yeto launch: syncing every {needed} inner steps (--sync-every {needed}): at the default H {h} no head "
          f"keeps up with this fleet's rounds ({rounds.reason})")
    sync = {**recipe.train.sync.model_dump(), "inner_steps": needed}
    return launch.model_copy(update={"recipe": recipe.updated(train={"sync": sync}).wire()})


def with_head_price(args, launch, head: HeadChoice | None = None):
    """The LaunchRun with the head's $/hr in its recipe: the head type that holds the syncer (sized here unless
    given), times --head-nodes, every node a VM of that type. Spend, the estimate and a refused island's move count it."""
    head = head if head is not None else size_head(args, launch)
    each = head.price(args.head_price) if head else args.head_price
    return launch.model_copy(update={"recipe": LaunchRecipe.upcast(launch.recipe).updated(
        prices={"head_price_per_hour": each * args.head_nodes}).wire()})


def run_on_head(args, launch, events=()):
    """Rent and wait for the run's head, then publish the run on it (after `events`, its lineage's) with its
    islands told the head's URL; (the head's URL, the LaunchRun as published). Nothing is rented before every
    check has passed."""
    state, run_id = state_dir(args), launch.run_id
    head = size_head(args, launch)                 # HeadTooSmall (a ValueError) before anything is rented
    each = head.price(args.head_price) if head else args.head_price
    price = each * args.head_nodes                 # every node of the head is a VM of that type
    launch = with_head_price(args, launch, head)
    secrets = heads.host_secrets(os.environ, args.env_from_host)
    old = heads.head_record(state, run_id)
    if old and old["state"] != "down":
        raise ValueError(f"run {run_id} has a head already ({old['cluster']}, {old['state']}); pick another --run-id "
                         f"(an interrupted launch: `sky down {old['cluster']}`, then remove {heads.head_dir(state, run_id)})")
    heads.prepare_bundle(state, run_id, secrets, nodes=args.head_nodes)
    launch = ship(state, launch)
    rec = heads.write_head(state, {**heads.new_record(state, run_id, price_per_hour=price, launched_at=time.time()),
                                   "head_nodes": args.head_nodes})
    os.environ.update(heads.head_env(rec))      # this process talks to the head as its operator
    print(f"head VM for {run_id}: {head.describe() if head else 'the smallest (16 GB): the model size is unknown'}; "
          f"${price:.2f}/hr counted in spend; secrets for the islands: {', '.join(secrets) or 'none'}")
    print(f"  {head_nodes_line(args.head_nodes, each)}")
    url = launch_head(state, run_id, memory_gb=head.vm.memory_gb if head else 16, cloud=args.head_cloud,
                      region=args.head_region, syncers=args.syncers or 1, nodes=args.head_nodes,
                      output=LaunchRecipe.upcast(launch.recipe).output)
    launch = launch.model_copy(update={"recipe": LaunchRecipe.upcast(launch.recipe).updated(bus_url=url).wire()})
    try:
        asyncio.run(publish(url, *checks.data_events(launch), *events, launch))
    except BaseException:     # the head never got the run: it would wait for one forever
        print(f"yeto launch: the run could not be handed to the head at {url}", file=sys.stderr)
        take_down(state, run_id)
        raise
    print(f"the head owns the run now: it cancels the islands and terminates itself when the run ends "
          f"(abort everything: yeto down {run_id} --now)")
    return url, launch
