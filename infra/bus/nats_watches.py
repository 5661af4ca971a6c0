"""A learner's watches: pull consumers the launcher makes for it (infra/bus/nats_watch_maker.py), which the learner only
pulls (`CONSUMER.MSG.NEXT`) and acks, so its credential creates no consumer at all, and none that pushes into a subject
of its choosing (bus/perms.py says why subject permissions cannot tell a push consumer from a pull one).

A learner process asks for its watches on `yeto.watches.<run>.<learner>` when it starts (the subject is its identity,
which the server checked); the launcher makes them afresh and answers. A stack with no launcher to ask (tests and tools
on a server without authentication) lets the learner make them itself. A watch whose consumer is gone (or answers 503
while its leader is elected) asks again, for the missing ones only: the others keep their place.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from nats.errors import NoRespondersError

from yeto.infra.bus.nats_consumer import NatsDelivery, NatsSubscription
from yeto.infra.bus.nats_watch_maker import BATCH, make_watches, watch_configs
from yeto.infra.bus.perms import WATCHES
from yeto.infra.bus.types import Delivery

log = logging.getLogger(__name__)
Callback = Callable[[Delivery], Awaitable[None]]
EXPIRES_S, PULL_BYTES = 5.0, 64 * 2**20      # per pull: seconds open, bytes in flight
ASK_TIMEOUT_S = 120.0    # the launcher's API calls wait up to API_TIMEOUT_S each; a later answer is lost: the pulls ask again


class LearnerWatches:
    """A learner's watches, each a pull loop handing its callback every message in stream order."""

    def __init__(self, bus, run_id: str, learner: str, callbacks: dict[str, Callback]):
        self.bus, self.run_id, self.learner, self.callbacks = bus, run_id, learner, callbacks
        self.configs = watch_configs(run_id, learner)
        self.num_made, self._asking, self._tasks = 0, asyncio.Lock(), list[asyncio.Task]()

    async def start(self) -> None:
        await self.ask(0)
        self._tasks = [asyncio.create_task(self._follow(kind, cb)) for kind, cb in self.callbacks.items()]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def ask(self, seen: int) -> None:
        """Have the watches made (afresh until this process had them once; later only the missing ones), unless they
        were since `seen` (the number made when the caller looked)."""
        async with self._asking:
            if self.num_made != seen:
                return
            try:
                fresh = self.num_made == 0          # until this process had them made once: all of them, afresh
                reply = await self._request(f"{WATCHES}.{self.run_id}.{self.learner}", json.dumps({"fresh": fresh}).encode())
                if "error" in (answer := json.loads(reply.data)):
                    raise ValueError(answer["error"])
            except NoRespondersError:      # no launcher: a stack without one (tests, tools) lets the learner make them
                try:
                    await make_watches(self.bus.js, self.run_id, self.learner, fresh=fresh)
                except Exception as e:  # noqa: BLE001 - a learner credential may not; the pulls ask again
                    log.warning("nobody makes this learner's watches, and it may not make them itself: %r", e)
                    return
            except Exception as e:  # noqa: BLE001 - away or refused: the pulls ask again
                log.warning("watches not made: %r", e)
                return
            self.num_made += 1

    async def _request(self, subject: str, body: bytes):
        """The launcher's answer, or PermissionError as soon as the server refuses the request's publish (a credential
        not this learner's: no answer ever comes, and each ask refused counts toward the learner's verdict,
        learners/transport/denials.py; it used to wait out ASK_TIMEOUT_S first)."""
        refused = asyncio.Event()

        def on_denied(denied: str) -> None:
            if denied.lower() == subject.lower():
                refused.set()
        listeners = getattr(self.bus, "on_denied", [])
        listeners.append(on_denied)
        asked, told = asyncio.ensure_future(self.bus.nc.request(subject, body, timeout=ASK_TIMEOUT_S)), \
            asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait({asked, told}, return_when=asyncio.FIRST_COMPLETED)
            if not asked.done():
                raise PermissionError(f"the bus refused the request on {subject}")
            return asked.result()
        finally:
            for task in (asked, told):
                task.cancel()
            listeners.remove(on_denied)

    async def _follow(self, kind: str, callback: Callback) -> None:
        nc, (stream, config) = self.bus.nc, self.configs[kind]
        got: asyncio.Queue = asyncio.Queue()
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, cb=got.put, pending_msgs_limit=-1, pending_bytes_limit=-1)
        request = json.dumps({"batch": BATCH, "expires": int(EXPIRES_S * 1e9), "max_bytes": PULL_BYTES}).encode()
        try:
            while True:
                seen = self.num_made
                try:
                    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{config.durable_name}", request, reply=inbox)
                    status = await self._pulled(got, callback)
                except Exception as e:  # noqa: BLE001 - disconnected: nats-py reconnects; pull again
                    log.info("pull of %s failed: %r", kind, e)
                    status = "error"
                if status == "gone":
                    await asyncio.sleep(1.0)
                    await self.ask(seen)
                elif status not in ("404", "408", "", "done"):
                    await asyncio.sleep(0.5)
        finally:
            await NatsSubscription(sub).close()

    async def _pulled(self, got: asyncio.Queue, callback: Callback) -> str:
        """Deliver one pull's messages as they come, ack the last; returns how the pull ended: its status code, "gone"
        (no consumer answers, 503, or it was deleted), "done" (its batch delivered) or "" (its end was lost)."""
        last, left, status = None, BATCH, ""
        deadline = time.monotonic() + EXPIRES_S + 2.0
        try:
            while left > 0:
                try:
                    msg = await asyncio.wait_for(got.get(), max(0.01, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                if not msg.data and msg.headers and msg.headers.get("Status"):
                    status, why = msg.headers["Status"], msg.headers.get("Description", "").lower()
                    status = "gone" if status == "503" or (status == "409" and "deleted" in why) else status
                    break
                await callback(NatsDelivery(msg, acks=False))
                last, left = msg, left - 1
            return status or ("done" if left == 0 else "")
        finally:
            if last is not None and last.reply:     # AckAll: everything delivered up to it
                await self.bus.nc.publish(last.reply, b"+ACK")
