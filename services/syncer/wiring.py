"""Wiring of the syncer service: the run fold and final cut on the runner, the fragment data plane beside it."""
from __future__ import annotations

import asyncio
import logging
import os

from yeto.infra.bus.snapshot_store import retrying
from yeto.infra.runner import Context, ServiceSpec, StateCodec
from yeto.schemas.fleet import ISLAND_ENDS
from yeto.schemas.subjects import event_subject
from yeto.services.syncer import backend, leaders, presence, runs, takeover
from yeto.services.syncer.dataplane import DataPlane
from yeto.services.syncer.fenced import FencedBus
from yeto.services.syncer.final_cut import final_cut
from yeto.services.syncer.lease import Lease

log = logging.getLogger(__name__)
OPEN_S = 2.0        # a try at opening the shard's consumer (its group's leader answers, maybe just elected)


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected K/N, e.g. 0/2 (this instance owns fragments p with p % N == K)") from None
    if not 0 <= k < n:
        raise ValueError(f"--shard {text!r}: K must be in [0, N)")
    return k, n


def spec(plane: DataPlane, leased: bool = False, node: str = "") -> ServiceSpec:
    """`leased`: merge only while holding the shard's lease (lease.py), a standby until then, every publish fenced;
    `node`: this VM's nats-server, which the holder keeps from leading what it merges through (leaders.py)."""
    fenced: list = []                  # the fenced bus, once the lease is held
    holding = asyncio.Event()

    async def act(intent: runs.FinalCut, ctx: Context):
        info = ctx.state.runs[intent.request.run_id]
        if leased and not holding.is_set():
            return []                   # a standby cuts nothing: the holder does, or this one on a tick once it holds it
        await final_cut(plane, fenced[0] if leased else ctx.bus, intent.request, info.sync)
        return []

    async def data_plane(ctx: Context) -> None:
        if not leased:
            return await plane.consume(ctx.bus, lambda: ctx.state.runs, ctx.stop)
        lease = await Lease.of(ctx.bus, plane.durable(), plane.instance, node)
        if lease is None:
            raise ValueError("--lease: the bus keeps one copy of its streams (a single-VM head): there is no other "
                             "syncer to hand the shard to; run without --lease")
        fenced.append(FencedBus(ctx.bus, lease))
        # a standby makes the runs' kernels while it waits, not after it took over (warmup.py), and says it stands by
        standing_by = asyncio.create_task(presence.present(lease))
        try:
            took = await lease.acquire(on_watch=lambda: plane.warm(ctx.state.runs))
        finally:
            standing_by.cancel()
        if took:                                                # taken from another holder
            await restore_live(fenced[0], ctx.state.runs)
            log.info("syncer %s: took the shard over (snapshots restored, the consumer kept)", plane.instance)
        # the consumer kept (takeover.py); the cluster may still be electing (a node just lost): each try bounded
        await retrying(lambda: asyncio.wait_for(plane.open(fenced[0], ack_wait_s=takeover.ACK_WAIT_S), OPEN_S))
        plane.held.fresh = lease.fresh              # a holder that may not publish lets its pushes go
        plane.consumer = takeover.FirstPushes(plane.consumer, plane.instance, plane.held)
        log.info("syncer %s: merging", plane.instance)
        holding.set()
        async with asyncio.TaskGroup() as group:          # a lost lease ends the service (LeaseLost)
            group.create_task(lease.keep(ctx.stop))
            group.create_task(plane.held.keep(takeover.KEEP_S, ctx.stop))
            group.create_task(takeover.keep_ack_wait(ctx.bus.js, plane.durable(), ctx.stop))
            group.create_task(plane.consume(fenced[0], lambda: ctx.state.runs, ctx.stop))
            if node:
                group.create_task(leaders.keep_off(ctx.bus, node, plane.durable(), ctx.stop))

    async def restore_live(bus, known: dict[str, runs.RunInfo]) -> None:
        """Each run not cut restored from the replicated snapshots while the consumer is handed over (not when the
        run's first push comes): the fetch, the restore and the versions last published (dataplane.py `core`)."""
        for run_id, info in known.items():
            if info.cut_requested is None:
                await plane.core(bus, run_id, info.sync)

    # Every shard folds the runs alike, so they share one snapshot; each loads it as its own shard.
    codec = StateCodec(version=runs.CODEC_VERSION, dump=runs.dump, load=lambda data: runs.load(data, plane.shard))
    return ServiceSpec(name="syncer", initial=lambda: runs.SyncerState(shard=plane.shard), evolve=runs.evolve,
                       decide=runs.decide, act=act,
                       event_subjects=tuple(event_subject("*", t) for t in ("RunLaunched", "IslandUp", "IslandReplaced",
                                                                                *ISLAND_ENDS,
                                                                                "FinalCutRequested", "FinalCutDone")),
                       background=(data_plane,), codec=codec)


def flags(parser) -> None:
    parser.add_argument("--shard", default="0/1", help="K/N: own fragments p with p %% N == K (default 0/1: all)")
    parser.add_argument("--lease", action="store_true",
                        help="a head over several VMs: merge the shard only while holding its lease on the bus; "
                             "until then stand by, and take it over when its holder's lapses (services/syncer/lease.py)")
    parser.add_argument("--lease-node", default="",
                        help="with --lease: the name of the nats-server on this syncer's VM (yeto-K); the lease's "
                             "holder keeps the leaders of the streams it merges through off it (services/syncer/leaders.py)")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads of the compiled decode, merge and encode kernels (default 0: the head's cores "
                             "over the N of --shard, as the N syncers share the head)")


def default_threads(shard: tuple[int, int], cores: int | None) -> int:
    """The head's cores shared out over the syncer processes on it (one each at least)."""
    return max(1, (cores or 1) // shard[1])


def build(args) -> ServiceSpec:
    shard = parse_shard(args.shard)
    if args.lease_node and not args.lease:
        raise ValueError("--lease-node names the node a lease's holder keeps leaders off: it needs --lease")
    if args.threads < 0:
        raise ValueError(f"--threads {args.threads}: at least 1, or 0 for the head's cores")
    backend.set_threads(args.threads or default_threads(shard, os.cpu_count()))
    return spec(DataPlane(state_dir=args.settings.state_dir, shard=shard,
                          instance=args.instance or "syncer"), leased=args.lease, node=args.lease_node)
