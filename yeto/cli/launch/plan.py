"""`yeto launch` without --gpu asks the planner service for a fleet; with local islands it starts a stack if none runs."""
from __future__ import annotations

import asyncio
import sys
import time

from yeto.cli.common import state_dir
from yeto.infra import stack
from yeto.infra.bus import Delivery, connect
from yeto.schemas.base import SchemaError, derive_id, parse
from yeto.schemas.commands import PlanFleet
from yeto.schemas.subjects import run_events


def local_stack_url(args) -> str:
    """The local stack's URL, started with --syncers N shards if none runs; a running stack with another number of
    syncers is refused (`yeto stack down` first): shards cannot be added to a stack while it serves runs."""
    started = time.monotonic()
    rec = stack.up(state_dir(args), syncers=getattr(args, "syncers", None))
    print(f"started the local stack at {rec['url']} in {time.monotonic() - started:.2f} s (state {state_dir(args)}; "
          "`yeto stack down` stops it)")
    return rec["url"]


def zygote_early(args) -> bool:
    """Local CPU islands on a stack this launch will start: start the stack's pre-imported learner now
    (infra/stack/zygote.py), so that its imports overlap the checks below and the stack's start; `stack.up` adopts
    it. True when started here (`drop_early_zygote` stops it if the launch ends before a stack adopted it)."""
    from yeto.cli.common import conf
    from yeto.cli.launch.checks import parse_fleet
    from yeto.infra.stack import zygote

    if args.dry_run or not args.gpu or conf(args).nats_url or getattr(args, "base_quantization", None) == "nf4":
        return False
    try:
        islands = parse_fleet(args.gpu)
    except ValueError:
        return False        # the checks below say why
    if not all(i.cloud == "local" and i.gpu == "cpu" for i in islands) or stack.stack_url(state_dir(args)):
        return False
    return zygote.start(state_dir(args)) is not None


def drop_early_zygote(args) -> None:
    """The launch ended without a stack (refused by a check, not confirmed): the zygote it started goes too."""
    from yeto.infra.stack import zygote

    if not stack.stack_url(state_dir(args)):
        zygote.stop(state_dir(args))


def refuse_syncers_elsewhere(args, named: str | None) -> None:
    """--syncers starts processes; a stack someone else runs (--nats-url) is not this command's to change."""
    if named and getattr(args, "syncers", None):
        raise ValueError(f"--syncers {args.syncers}: the stack at {named} runs its own syncers; start it with "
                         f"`yeto stack up --syncers {args.syncers}` instead, or omit --nats-url")


async def ask_planner(url: str, run_id: str, request: dict, timeout_s: float = 120.0) -> dict:
    """Publish PlanFleet and wait for the planner's FleetPlanned / FleetPlanFailed answer."""
    cmd = PlanFleet(id=derive_id(run_id, "PlanFleet"), run_id=run_id, source="cli", request=request)
    bus = await connect(url, name="launch-plan")
    answer = asyncio.get_running_loop().create_future()

    async def on_event(raw: Delivery) -> None:
        try:
            e = parse(raw.data)
        except SchemaError:
            return
        if e.causation_id == cmd.id and e.type in ("FleetPlanned", "FleetPlanFailed") and not answer.done():
            answer.set_result(e.model_dump())

    try:
        watch = await bus.watch(run_events(run_id), on_event, deliver="new")   # listening before asking
        await bus.publish(cmd)
        try:
            return await asyncio.wait_for(answer, timeout_s)
        except asyncio.TimeoutError:
            raise ValueError(f"the planner did not answer within {timeout_s:.0f}s; is the stack's planner up "
                             f"(`yeto stack status`)? Or pass --gpu") from None
        finally:
            await watch.close()
    finally:
        await bus.close()


def fleet_from_planner(args, url: str, run_id: str) -> list[dict] | None:
    from yeto.cli.shape import request_from_args

    return fleet_from_answer(args, asyncio.run(ask_planner(url, run_id, request_from_args(args).to_dict())))


def fleet_from_answer(args, answer: dict, *, own_head: bool = False) -> list[dict] | None:
    """The planner's answer shown, and its fleet (`yeto launch` shows the plan's cost and asks once), else None;
    `own_head`: the run rents its own head, which then runs the syncers the plan's rounds need."""
    from yeto.cli.shape import render
    from yeto.services.planner.api import FleetPlan

    if answer["type"] == "FleetPlanFailed":
        print(f"yeto launch: no fleet: {answer['reason']}", file=sys.stderr)
        return None
    plan = answer["plan"]
    try:
        print(render(FleetPlan.from_dict(plan), args.model, args.price_margin))
    except TypeError:
        print(f"planned fleet: {plan.get('gpu')} at ${plan.get('total_price_per_hour', 0):.2f}/hr")
    adopt_head_plan(args, plan, own_head=own_head)
    return [{"cloud": i["cloud"], "gpu": i["gpu"], "count": i["count"], "nodes": i["nodes"], "region": i["region"],
             "spot": i["spot"], "price_per_hour": i["price_per_hour"], "instance_type": i.get("instance_type")}
            for i in plan["islands"]]


def adopt_head_plan(args, plan: dict, *, own_head: bool = False) -> None:
    """Where no head keeps up with the planned fleet's rounds at the default H, the planner raised H (its head line
    says why): the run syncs every that many inner steps unless --sync-every was given (a given one that lags is
    refused by the planner). A head the run rents (`own_head`) runs the syncer processes the rounds need, unless
    --syncers was given; a stack of the user's keeps its own."""
    from yeto.schemas.recipe import SyncConfig

    rounds = (plan.get("head") or {}).get("rounds") or {}
    syncers = rounds.get("syncers") if rounds.get("fits") else None
    if own_head and getattr(args, "syncers", None) is None and isinstance(syncers, int) and syncers > 1:
        args.syncers = syncers
        print(f"yeto launch: the head runs {syncers} syncer processes (--syncers {syncers}), so its rounds keep up")
    planned = rounds.get("sync_every")
    if getattr(args, "sync_every", None) is None and isinstance(planned, int) and planned != SyncConfig.inner_steps:
        args.sync_every = planned
        print(f"yeto launch: syncing every {planned} inner steps (--sync-every {planned}), so the head keeps up with "
              "the planned fleet's rounds")
