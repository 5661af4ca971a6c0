"""A run's final cut on the data plane: take in the last pushes, merge what is in, snapshot, broadcast exact
f32 keyframes of Θ, and report FinalCutDone (what the finalizer builds the artifact from)."""
from __future__ import annotations

import asyncio
import hashlib
import logging

from yeto.infra.bus import Bus
from yeto.schemas.final import FinalCutDone, FinalCutRequested
from yeto.services.syncer import snapshot, warmup
from yeto.services.syncer.dataplane import DataPlane
from yeto.services.syncer.outputs import Broadcast

log = logging.getLogger(__name__)
POLL_S = 0.1
MAX_DRAIN_S = 300.0    # the wait's bound in wall time, whatever held it up (a fresh cache's compiles took ~60 s)


async def drain(plane: DataPlane, run_id: str, sync: dict, timeout_s: float = 15.0) -> None:
    """Wait (bounded) until every push in the fragment stream has been delivered here and taken in: the
    learners' last pushes, sent as they finished, belong in the final cut. Not by counting the run's
    messages left in the stream: those a killed predecessor had taken stay there until the consumer's
    ack_wait, and each cut after a syncer crash waited out the whole timeout.
    The bound counts only time in which pushes could have been taken in: not while a batch is in hand, while the
    run's kernels still compile (warmup.py), nor more than two polls for a loop held up (a compile on it). On an empty
    kernel cache under load the first rounds' compiles took longer than the bound, and a 4-step run's cut came
    with three of its four pushes unread (tests/bench/test_bench_lora_task.py failed so in CI at 4cedf54).
    Nor is a push nak'ed for a retry (its learner not yet announced: the syncer's events lag behind its pushes while a
    compile holds the GIL) counted as delivered: JetStream counts it as neither pending nor taken until it comes back,
    and a cut that goes on without it drops it (the likely cause of the same test's failure in a .ci/run at 6a709a7:
    one of four pushes merged, the cut done with nothing pending and no warning; that run kept no evidence of naks)."""
    loop = asyncio.get_running_loop()
    waited, last = 0.0, loop.time()
    started = last
    while waited < timeout_s and last - started < MAX_DRAIN_S:
        try:
            undelivered = await plane.consumer.num_pending() if plane.consumer else None
        except Exception as e:  # noqa: BLE001 - reconnecting: ask again
            log.debug("consumer info: %r", e)
            undelivered = None
        if undelivered == 0 and not plane.busy and not plane.refusals.awaited(run_id):
            return
        await asyncio.sleep(POLL_S)      # polling the server's count: there is no event for "all delivered"
        now = loop.time()
        if not plane.busy and warmup.ready(sync):
            waited += min(now - last, 2 * POLL_S)
        last = now
    log.warning("run %s: final cut after %.0fs (%.0fs free to take pushes in) with pushes still unread", run_id,
                last - started, waited)


async def final_cut(plane: DataPlane, bus: Bus, request: FinalCutRequested, sync: dict) -> None:
    run_id = request.run_id
    if run_id in plane.cut_started:
        return
    plane.cut_started.add(run_id)
    await drain(plane, run_id, sync)
    plane.cutting.add(run_id)
    async with plane.lock:
        core = await plane.core(bus, run_id, sync)
        await plane.perform(bus, run_id, core.final_cut())
        await plane.writer.drain(run_id)            # the rounds' snapshots first: none may replace the final one
        digest, versions = hashlib.sha256(), {}
        for p in sorted(core.fragments):
            _, sha = await asyncio.to_thread(snapshot.write, plane.run_dir(run_id), core.snapshot(p))
            digest.update(sha.encode())
            versions[p] = core.fragments[p].version
            await plane.perform(bus, run_id, [Broadcast(*core.fragments[p].exact_keyframe())])
        await plane.held.settle()
        await plane.held.release_run(run_id)
    k, n = plane.shard
    await bus.publish(request.caused(FinalCutDone, f"{k}/{n}", versions=versions, snapshot_path=str(plane.run_dir(run_id)),
                                     sha256=digest.hexdigest(), keyframe_versions=versions, source=plane.instance,
                                     shard=k, num_shards=n))
