"""The launcher's side of a learner's watches (infra/bus/nats_watches.py): on a learner's request, its pull consumers with
its run's filters: the run's keyframes headers only, last per subject (a joining learner sees the whole model's
announcements at once), all its deltas, all its CheckpointMarkedFinal. Durable, acked (a delivery lost to a reconnection
comes again), and dropped by the server after INACTIVE_S without a pull.

A learner process's first request asks for them afresh (a new process must see everything again, not what its
predecessor acked); a later one (a pull that found no consumer) only for those that are missing. Remaking live ones on
every such request livelocked a learner on a cluster that had just lost a node: a consumer whose leader was being
elected answered 503, the learner asked again, the remake deleted all three (their new groups elected again, past the
API's timeout) and the next pull found none again, for minutes.

A JetStream API request sent as a node dies, or before the meta layer has learnt a consumer's new leader, is never
answered (not refused): one asked with a 30 s timeout after a head node's loss answered the learner "nats: timeout" 35 s
after the kill (a rehearsal's launcher log, 2026-12-06), while the consumers had their new leaders 4-8 s after it. Each
call is tried with a short timeout (TRY_FIRST_S, doubled up to TRY_LAST_S), a line each miss, and all of one request's
calls within API_TIMEOUT_S (an R3 group's election with one peer lost takes seconds)."""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from yeto.infra.bus.nats_bus import retryable
from yeto.infra.bus.nats_consumer import NatsSubscription
from yeto.infra.bus.perms import WATCHES, watch_consumer
from yeto.schemas.base import check_run_id
from yeto.schemas.subjects import EVT_STREAM, GDELTA_STREAM, GKEY_STREAM, event_subject, run_deltas, run_keyframes

log = logging.getLogger(__name__)
T = TypeVar("T")
BATCH = 64                                           # messages per pull (the learner's)
ACK_WAIT_S, INACTIVE_S, REMAKE_S, API_TIMEOUT_S = 30.0, 3600.0, 1.0, 30.0
TRY_FIRST_S, TRY_LAST_S = 1.0, 5.0      # one API call's first try's timeout, doubled on each miss up to this
LEARNER = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


def watch_configs(run_id: str, learner: str) -> dict[str, tuple[str, ConsumerConfig]]:
    """The learner's watches by kind: (stream, consumer config), every filter its own run's."""
    common = dict(durable_name=watch_consumer(run_id, learner), ack_policy=AckPolicy.ALL, ack_wait=ACK_WAIT_S,
                  max_ack_pending=4 * BATCH, inactive_threshold=INACTIVE_S)
    return {"keyframes": (GKEY_STREAM, ConsumerConfig(filter_subject=run_keyframes(run_id), headers_only=True,
                                                      deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, **common)),
            "deltas": (GDELTA_STREAM, ConsumerConfig(filter_subject=run_deltas(run_id),
                                                     deliver_policy=DeliverPolicy.ALL, **common)),
            "final": (EVT_STREAM, ConsumerConfig(filter_subject=event_subject(run_id, "CheckpointMarkedFinal"),
                                                 deliver_policy=DeliverPolicy.ALL, **common))}


async def _api(call: Callable[[float], Awaitable[T]], what: str, deadline: float) -> T:
    """`call(timeout)`, asked again with a doubled timeout while it goes unanswered or is refused as unavailable, until
    `deadline` (the loop's clock); NotFoundError and other refusals at once. TimeoutError past the deadline."""
    loop, try_s = asyncio.get_running_loop(), TRY_FIRST_S
    while True:
        wait_s = max(0.05, min(try_s, deadline - loop.time()))
        try:
            return await asyncio.wait_for(call(wait_s), wait_s)
        except NotFoundError:
            raise
        except Exception as e:
            if not retryable(e):
                raise
            if loop.time() >= deadline:
                raise TimeoutError(f"{what}: no answer in time ({e!r})") from e
            log.info("%s: no answer within %.1fs (%r); asking again", what, wait_s, e)
            try_s = min(2 * try_s, TRY_LAST_S)


async def make_watches(js, run_id: str, learner: str, *, fresh: bool = True) -> list[str]:
    """Make the learner's watches; returns the kinds made. `fresh`: all of them from a fresh start (what they delivered
    before is delivered again); otherwise only those that do not exist (a live one keeps its place in its stream).
    All its API calls within API_TIMEOUT_S, each asked again while unanswered (_api)."""
    made, deadline = [], asyncio.get_running_loop().time() + API_TIMEOUT_S
    for kind, (stream, config) in watch_configs(run_id, learner).items():
        name = config.durable_name
        where = f"{stream} > {name}"
        if not fresh:
            try:
                await _api(lambda t, s=stream, n=name: js.consumer_info(s, n, timeout=t), f"info of {where}", deadline)
                continue
            except NotFoundError:
                pass
        else:
            try:
                await _api(lambda _t, s=stream, n=name: js.delete_consumer(s, n), f"delete of {where}", deadline)
            except NotFoundError:
                pass
        await _api(lambda t, s=stream, c=config: js.add_consumer(s, c, timeout=t), f"create of {where}", deadline)
        made.append(kind)
    return made


async def drop_watches(bus, run_id: str, learners: list[str]) -> None:
    """Delete the watches of an ended run's learners (their credentials are revoked: nothing pulls them again) rather
    than leave them to the streams' consumer limits for INACTIVE_S. A bus without NATS has none."""
    for learner in learners if getattr(bus, "js", None) is not None else []:
        for stream, config in watch_configs(run_id, learner).values():
            try:
                await bus.js.delete_consumer(stream, config.durable_name)
            except NotFoundError:
                pass


def _fresh(data: bytes) -> bool:
    """The request's body: {"fresh": false} asks only for missing watches; anything else (an empty body, an older
    learner's) for all of them afresh. The subject is the learner's identity: a body can only touch its own watches."""
    try:
        return json.loads(data or b"{}").get("fresh", True) is not False
    except (ValueError, AttributeError):
        return True


async def serve(bus, stop: asyncio.Event) -> None:
    """The launcher's side, until `stop`: make a learner's watches when it asks (one instance of a queue group answers;
    the same learner's watches afresh at most once per REMAKE_S). A bus without NATS (pure tests) serves nothing."""
    made: dict[tuple[str, str], float] = {}

    async def on_request(msg) -> None:
        run_id, learner = msg.subject.split(".")[2:4]
        try:
            check_run_id(run_id)
            if not LEARNER.fullmatch(learner):
                raise ValueError(f"{learner!r} is no learner name")
            fresh = _fresh(msg.data)
            if not fresh:
                answer = {"ok": True, "made": await make_watches(bus.js, run_id, learner, fresh=False)}
            elif time.monotonic() - made.get((run_id, learner), -REMAKE_S) >= REMAKE_S:
                answer = {"ok": True, "made": await make_watches(bus.js, run_id, learner)}
                made[(run_id, learner)] = time.monotonic()
            else:
                answer = {"ok": True, "made": []}
        except Exception as e:  # noqa: BLE001 - said to the asker; the launcher goes on
            log.warning("watches of %s of run %s not made: %s", learner, run_id, e)
            answer = {"error": str(e)[:200]}
        if msg.reply:
            await msg.respond(json.dumps(answer).encode())

    if getattr(bus, "nc", None) is None:
        await stop.wait()
        return
    sub = await bus.nc.subscribe(f"{WATCHES}.*.*", queue="launcher", cb=on_request)
    try:
        await stop.wait()
    finally:
        await NatsSubscription(sub).close()
