"""A learner's watches: pull consumers the launcher makes for it (infra/bus/nats_watch_maker.py), which the learner only
pulls (`CONSUMER.MSG.NEXT`) and acks, so its credential creates no consumer at all, and none that pushes into a subject
of its choosing (bus/perms.py says why subject permissions cannot tell a push consumer from a pull one).

A learner process asks for its watches on `yeto.watches.<run>.<learner>` when it starts (the subject is its identity,
which the server checked); the launcher makes them afresh and answers. A stack with no launcher to ask (tests and tools
on a server without authentication) lets the learner make them itself. A watch whose consumer is gone (or answers 503
while its leader is elected) asks again, for the missing ones only: the others keep their place.

The pulls never wait on an ask: a pull that finds no consumer starts one (one at a time, a line each that fails) and
pulls again after a short pause, doubled up to GONE_LAST_S, so a consumer whose new leader is elected is read again at
once whatever the launcher answers. Each pull asks the server for an idle heartbeat every HEARTBEAT_S: a pull of the
small messages (keyframes' headers, CheckpointMarkedFinal) taken by a consumer leader that died (its node lost) is given
up after MISSED_BEATS silent beats, not after its whole EXPIRES_S (a delta chunk may take longer than that to arrive
over a slow link, and the server beats only while it has nothing to send).
After a head node's loss a learner's CheckpointMarkedFinal came 21-24 s late: the final watch's pull loop waited on an
ask whose launcher waited 30 s for an API answer that never came (infra/bus/nats_watch_maker.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import NoRespondersError

from yeto.infra.bus.nats_consumer import NatsDelivery, NatsSubscription
from yeto.infra.bus.nats_watch_maker import API_TIMEOUT_S, BATCH, make_watches, watch_configs
from yeto.infra.bus.perms import WATCHES
from yeto.infra.bus.types import Delivery

log = logging.getLogger(__name__)
T = TypeVar("T")
Callback = Callable[[Delivery], Awaitable[None]]
EXPIRES_S, PULL_BYTES = 5.0, 64 * 2**20      # per pull: seconds open, bytes in flight
HEARTBEAT_S, MISSED_BEATS = 1.0, 3           # per pull: the server's idle heartbeat; silent this many: its leader is gone
BEATEN = ("keyframes", "final")              # the watches whose pulls are given up on missed beats (small messages)
GONE_FIRST_S, GONE_LAST_S = 0.25, 1.0        # a pull that found no consumer: pause before the next, doubled up to this
# An ask's wait for the launcher's answer: ASK_FIRST_S, doubled on each unanswered one up to as long as the launcher may
# take (its calls all within API_TIMEOUT_S). An answer can be lost for good: a request that reached a launcher on a lost
# node, or one whose launcher's connection was replaced before it answered (the server allows a reply only on the
# connection the request came in on: `permissions violation for publish to _INBOX...`, a CPU-starved launcher in CI).
# The first ask used to wait ASK_TIMEOUT_S whole for it, and the learner's watches with it. A later answer is lost: the
# pulls ask again, and asking afresh twice is harmless (the launcher answers one request at a time and remakes a
# learner's watches afresh at most once per REMAKE_S: the second finds them just made).
ASK_TIMEOUT_S, ASK_FIRST_S = API_TIMEOUT_S + 10.0, 5.0


class LearnerWatches:
    """A learner's watches, each a pull loop handing its callback every message in stream order."""

    def __init__(self, bus, run_id: str, learner: str, callbacks: dict[str, Callback]):
        self.bus, self.run_id, self.learner, self.callbacks = bus, run_id, learner, callbacks
        self.configs = watch_configs(run_id, learner)
        self.num_made, self._asking, self._tasks = 0, asyncio.Lock(), list[asyncio.Task]()
        self.num_failed = 0                          # asks unanswered or refused since the last that made them
        self._asker: asyncio.Task | None = None

    async def start(self) -> None:
        await self.ask(0)
        self._tasks = [asyncio.create_task(self._follow(kind, cb)) for kind, cb in self.callbacks.items()]

    async def close(self) -> None:
        tasks = [*self._tasks, *([self._asker] if self._asker else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def ask_soon(self, seen: int) -> None:
        """Start an ask unless one is under way (the pulls go on meanwhile)."""
        if self._asker is None or self._asker.done():
            self._asker = asyncio.create_task(self.ask(seen))

    async def ask(self, seen: int) -> None:
        """Have the watches made (afresh until this process had them once; later only the missing ones), unless they
        were since `seen` (the number made when the caller looked)."""
        async with self._asking:
            if self.num_made != seen:
                return
            fresh = self.num_made == 0          # until this process had them made once: all of them, afresh
            wait_s = min(ASK_FIRST_S * 2 ** min(self.num_failed, 8), ASK_TIMEOUT_S)
            started = time.monotonic()
            try:
                reply = await self._request(f"{WATCHES}.{self.run_id}.{self.learner}", json.dumps({"fresh": fresh}).encode(),
                                            wait_s)
                if "error" in (answer := json.loads(reply.data)):
                    raise ValueError(answer["error"])
            except NoRespondersError:      # no launcher: a stack without one (tests, tools) lets the learner make them
                try:
                    await self._unless_refused(make_watches(self.bus.js, self.run_id, self.learner, fresh=fresh),
                                               lambda denied: denied.startswith("$js.api.consumer."),
                                               "this learner's consumer requests")
                except Exception as e:  # noqa: BLE001 - a learner credential may not; the pulls ask again
                    self.num_failed += 1
                    log.warning("nobody makes this learner's watches, and it may not make them itself (ask %d): %r",
                                self.num_failed, e)
                    return
            except Exception as e:  # noqa: BLE001 - away, refused or unanswered: the pulls ask again
                self.num_failed += 1
                log.warning("watches not made (ask %d, %.1fs): %r; asked again when a pull finds none", self.num_failed,
                            time.monotonic() - started, e)
                return
            if self.num_failed:
                log.warning("watches made after %d asks that were not answered or refused", self.num_failed + 1)
            self.num_made, self.num_failed = self.num_made + 1, 0

    async def _request(self, subject: str, body: bytes, wait_s: float):
        """The launcher's answer, or PermissionError as soon as the server refuses the request's publish (a credential
        not this learner's: no answer ever comes, and each ask refused counts toward the learner's verdict,
        learners/transport/denials.py; it used to wait out ASK_TIMEOUT_S first)."""
        return await self._unless_refused(self.bus.nc.request(subject, body, timeout=wait_s),
                                          lambda denied: denied == subject.lower(), f"the request on {subject}")

    async def _unless_refused(self, work: Awaitable[T], refused_on: Callable[[str], bool], what: str) -> T:
        """`work`'s result, or PermissionError as soon as the server refuses a publish `refused_on` matches (lower
        case): a refused request is never answered."""
        refused = asyncio.Event()

        def on_denied(denied: str) -> None:
            if refused_on(denied.lower()):
                refused.set()
        listeners = getattr(self.bus, "on_denied", [])
        listeners.append(on_denied)
        asked, told = asyncio.ensure_future(work), asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait({asked, told}, return_when=asyncio.FIRST_COMPLETED)
            if not asked.done():
                raise PermissionError(f"the bus refused {what}")
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
        request = json.dumps({"batch": BATCH, "expires": int(EXPIRES_S * 1e9), "max_bytes": PULL_BYTES,
                              "idle_heartbeat": int(HEARTBEAT_S * 1e9)}).encode()
        pause = GONE_FIRST_S
        try:
            while True:
                seen = self.num_made
                try:
                    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{config.durable_name}", request, reply=inbox)
                    status = await self._pulled(got, callback, kind in BEATEN)
                except Exception as e:  # noqa: BLE001 - disconnected: nats-py reconnects; pull again
                    log.info("pull of %s failed: %r", kind, e)
                    status = "error"
                if status == "gone":       # no consumer (yet): have it made, and pull again meanwhile
                    self.ask_soon(seen)
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, GONE_LAST_S)
                    continue
                pause = GONE_FIRST_S
                if status not in ("404", "408", "", "done", "moved"):
                    await asyncio.sleep(0.5)
        finally:
            await NatsSubscription(sub).close()

    async def _pulled(self, got: asyncio.Queue, callback: Callback, beaten: bool = True) -> str:
        """Deliver one pull's messages as they come, ack the last; returns how the pull ended: its status code, "gone"
        (no consumer answers, 503, or it was deleted), "moved" (its consumer's leader changed), "done" (its batch
        delivered) or "" (its end was lost: nothing, not even a heartbeat, for MISSED_BEATS heartbeats when `beaten`, else
        by EXPIRES_S and 2 s)."""
        last, left, status = None, BATCH, ""
        deadline = time.monotonic() + EXPIRES_S + 2.0
        try:
            while left > 0:
                silent = min(deadline, time.monotonic() + MISSED_BEATS * HEARTBEAT_S) if beaten else deadline
                try:
                    msg = await asyncio.wait_for(got.get(), max(0.01, silent - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                if not msg.data and msg.headers and msg.headers.get("Status") == "100":
                    continue                    # the consumer's leader is alive and holds the pull
                if not msg.data and msg.headers and msg.headers.get("Status"):
                    status, why = msg.headers["Status"], msg.headers.get("Description", "").lower()
                    status = "gone" if status == "503" or (status == "409" and "deleted" in why) else \
                        "moved" if status == "409" and "leadership" in why else status   # a new leader: pull it
                    break
                await callback(NatsDelivery(msg, acks=False))
                last, left = msg, left - 1
            return status or ("done" if left == 0 else "")
        finally:
            if last is not None and last.reply:     # AckAll: everything delivered up to it
                await self.bus.nc.publish(last.reply, b"+ACK")
