"""The bus over NATS JetStream: Yeto's publish rules, stored reads, request/reply; consumers in bus/nats_consumer.py."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import nats
from nats.errors import AuthorizationError, ConnectionClosedError, ConnectionReconnectingError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError, ServiceUnavailableError

from yeto.infra.bus.auth import CREDS_ENV, load_identity
from yeto.infra.bus.nats_consumer import NatsConsumer, NatsSubscription, watch
from yeto.infra.bus.types import Deliver, Delivery, NoResponders, subject_of
from yeto.schemas.base import Message, to_bytes
from yeto.schemas.subjects import stream_for

log = logging.getLogger(__name__)
T = TypeVar("T")
# No stream answering is retried too: right after a restart JetStream may not have loaded its streams yet.
RETRYABLE = (NatsTimeout, asyncio.TimeoutError, NoRespondersError, ServiceUnavailableError, ConnectionClosedError,
             ConnectionReconnectingError, NoStreamResponseError)
# A cluster refuses a publish whose Nats-Msg-Id an identical message from another publisher holds in a Raft proposal
# (two instances of a service publish one derived id at once): asked again, it answers with the duplicate's ack.
DUPLICATE_IN_PROCESS = 10158


def retryable(e: Exception) -> bool:
    return isinstance(e, RETRYABLE) or (isinstance(e, APIError) and e.err_code == DUPLICATE_IN_PROCESS)


# A client pings every 2 s, so the server sees a live one's traffic even while it only downloads and pings (and drops,
# nats/server.py) only a silent one. Its own verdict takes 30 PINGs: a PONG queues behind a long download on a slow link,
# and a false "stale" would drop and restart that download again and again. Rounds never wait on either (liveness.py).
PING_INTERVAL_S, MAX_PINGS_OUT = 2, 30


# A credential the server refuses (tampered, revoked, of an ended run) is refused on every retry: after REFUSED_S of
# nothing but refusals the connection gives up. A users-file reload in flight refuses a new credential only a moment.
REFUSED_S = 5.0
SERVER_TRY_S = 2.0      # one try at one server of the URL
# A consumer's first bind and a read of a subject's last message (a service's snapshot at start) ride out a server
# that is away for a moment: a reload that drops connections (a run's users added), a reconnection, a JetStream leader
# election after a head node's loss. A service that raised there died at start (a finalizer on a head of three VMs
# did, 2026-12-06: the run then had one finalizer, lost with its node later).
OPEN_FOR_S = 120.0


async def _ride_out(call: Callable[[], Awaitable[T]], what: str, *, for_s: float = OPEN_FOR_S, delay: float = 0.25,
                    max_delay: float = 2.0, say: bool = True) -> T:
    """`call()`, tried again with doubling pauses (`delay` up to `max_delay`) while its errors are retryable, for up to
    `for_s`; each retry said in a line unless `say` is False (a publish retries quietly)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + for_s
    while True:
        try:
            return await call()
        except Exception as e:
            if not retryable(e):
                raise
            if loop.time() > deadline:
                raise ConnectionError(f"{what}: no answer for {for_s:.0f}s ({e!r}): is the NATS server (or a majority "
                                      "of the head's cluster) up?") from e
            if say:
                log.info("%s: not opened yet (%r); trying again in %.2fs", what, e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)


class CredentialRefused(ConnectionError):
    """The server refused this connection's credential (an authorization violation) for REFUSED_S on end."""


# A publish the server refused on a connection it keeps (permissions violation); nats-py lower-cases the line.
DENIED = re.compile(r'permissions violation for publish to "([^"]+)"', re.IGNORECASE)


def refusal(e: Exception) -> bool:
    return isinstance(e, AuthorizationError) or "authorization violation" in str(e).lower()


def redact(url: str) -> str:
    """The URL without any user:password@ part (for messages and logs)."""
    scheme, sep, rest = url.rpartition("://")
    return f"{scheme}{sep}{rest.rsplit('@', 1)[-1]}"


async def _log_error(e: Exception) -> None:
    log.warning("nats: %s", e)


class NatsBus:
    """A NATS connection and its JetStream context. `nc` and `js` are for infra's stream admin and the
    tape writer's raw pulls only; everything else goes through the Bus protocol."""

    def __init__(self, nc, name: str):
        self.nc, self.js, self.name = nc, nc.jetstream(timeout=5.0), name
        self.refused = asyncio.Event()
        self.on_denied: list[Callable[[str], None]] = []   # told each subject the server refused a publish on
        self.num_acked = 0                                   # publishes the stream acknowledged

    @classmethod
    async def connect(cls, url: str, *, name: str = "yeto", connect_timeout: float = 10.0) -> NatsBus:
        """Credentials come from the 0600 file $YETO_NATS_CREDS names (infra/bus/auth.py), never from the URL
        or a command line; over tls:// the server's certificate is checked against $YETO_NATS_CA when pinned
        (a head's self-signed one), else against the system's CAs with its hostname."""
        tls = None
        if url.startswith("tls://"):
            ca = os.path.expanduser(os.environ.get("YETO_NATS_CA") or "") or None   # ~/...: a cloud island's mounts
            tls = ssl.create_default_context(cafile=ca)
            tls.check_hostname = ca is None   # a pinned certificate is the identity; else the name must match
        creds = os.environ.get(CREDS_ENV)
        ident = load_identity(os.path.expanduser(creds)) if creds else {}
        auth = {k: ident[k] for k in ("user", "password", "inbox_prefix") if k in ident}
        # nats-py retries the first connection forever (max_reconnect_attempts=-1, also what keeps a running
        # service through a server restart), refused and unauthorized alike: the deadline is ours to keep.
        nc, errors, refused, since = nats.NATS(), list[Exception](), asyncio.Event(), list[float]()
        loop = asyncio.get_running_loop()
        on_denied: list[Callable[[str], None]] = []

        async def on_error(e: Exception) -> None:
            errors[:] = [e]       # the last one, for the message should the deadline pass
            if (denied := DENIED.search(str(e))) is not None:
                for listener in on_denied:
                    listener(denied[1])
            if since:     # refused already: told once, the rest (refusals, the resets after them) would only repeat it
                if refusal(e) and loop.time() - since[0] >= REFUSED_S:
                    refused.set()
                return
            if refusal(e):        # `since`: the first refusal since the last connection (a reset may follow each)
                since.append(loop.time())
            await _log_error(e)

        async def on_connect() -> None:
            since.clear()
        # A cluster's URL names every node, comma-separated: nats-py takes them as a list
        connecting = asyncio.ensure_future(nc.connect(
            url.split(","), name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.25,  # type: ignore[arg-type]
            ping_interval=PING_INTERVAL_S, max_outstanding_pings=MAX_PINGS_OUT, connect_timeout=SERVER_TRY_S,
            allow_reconnect=True,
            error_cb=on_error, reconnected_cb=on_connect, tls=tls, **auth))
        refusing = asyncio.ensure_future(refused.wait())
        # every node after the first may cost one try on a dead one (a lost VM's address answers nothing for 2 s)
        connect_timeout += SERVER_TRY_S * url.count(",")
        await asyncio.wait((connecting, refusing), timeout=connect_timeout, return_when=asyncio.FIRST_COMPLETED)
        refusing.cancel()
        try:
            if not connecting.done():
                connecting.cancel()
                raise asyncio.TimeoutError()
            connecting.result()
        except (asyncio.TimeoutError, asyncio.CancelledError, OSError, nats.errors.Error) as e:
            try:
                await asyncio.wait_for(nc.close(), 1.0)
            except Exception:  # noqa: BLE001 - it never connected: nothing more to release
                pass
            if refused.is_set():
                raise CredentialRefused(f"the bus at {redact(url)} refused this process's credential (authorization "
                                        f"violation) for {REFUSED_S:.0f}s: it was altered or revoked, or its run "
                                        f"has ended") from None
            last = errors[-1] if errors else e
            raise ConnectionError(f"cannot reach NATS at {redact(url)} within {connect_timeout:.0f}s ({last}): is the stack "
                                  f"up? (`yeto stack up`)") from None
        bus = cls(nc, name)
        bus.refused = refused    # set should a later reconnection meet only refusals for REFUSED_S
        bus.on_denied = on_denied
        return bus

    async def publish(self, msg: Message, *, retry_for: float = 60.0) -> int:
        return await self.publish_raw(subject_of(msg), to_bytes(msg), msg_id=msg.id, retry_for=retry_for)

    async def publish_raw(self, subject: str, payload: bytes, *, msg_id: str | None = None,
                          headers: dict[str, str] | None = None, retry_for: float = 60.0) -> int:
        hdrs = dict(headers or {})
        if msg_id:
            hdrs["Nats-Msg-Id"] = msg_id
        ack = await _ride_out(lambda: self.js.publish(subject, payload, headers=hdrs or None), f"publish to {subject}",
                              for_s=retry_for, delay=0.05, max_delay=1.0, say=False)
        self.num_acked += 1
        return ack.seq

    async def consumer(self, subjects: Sequence[str], *, durable: str | None = None, after_seq: int = 0,
                       ack: bool = True, ack_wait_s: float = 60.0, max_deliver: int = -1,
                       max_ack_pending: int = 1000) -> NatsConsumer:
        c = NatsConsumer(self.js, stream_for(subjects[0]).name, tuple(subjects), durable=durable, after_seq=after_seq,
                         ack=ack, ack_wait_s=ack_wait_s, max_deliver=max_deliver, max_ack_pending=max_ack_pending)
        await _ride_out(c.open, f"a consumer on {', '.join(subjects)}")
        return c

    async def watch(self, subject: str, callback: Callable[[Delivery], Awaitable[None]], *,
                    deliver: Deliver = "all", headers_only: bool = False) -> NatsSubscription:
        return await watch(self.js, subject, callback, deliver=deliver, headers_only=headers_only)

    async def last(self, subject: str) -> tuple[dict[str, str], bytes] | None:
        try:
            raw = await _ride_out(lambda: self.js.get_last_msg(stream_for(subject).name, subject), f"the last {subject}")
        except NotFoundError:
            return None
        return dict(raw.headers or {}), raw.data or b""

    async def direct_get(self, stream: str, seq: int, *, timeout_s: float = 120.0) -> tuple[dict[str, str], bytes] | None:
        """Payload raw (not base64 as the STREAM.MSG.GET API sends it). The timeout is long: a 4 MiB chunk
        over a slow link takes seconds."""
        resp = await self.nc.request(f"$JS.API.DIRECT.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=timeout_s)
        headers = dict(resp.headers or {})
        if not resp.data and headers.get("Status"):
            if headers["Status"] == "404":
                return None
            raise ConnectionError(f"direct get of {stream} #{seq}: {headers.get('Status')} {headers.get('Description', '')}")
        return headers, resp.data

    async def direct_last(self, subject: str, *, timeout_s: float = 120.0) -> tuple[int, dict[str, str], bytes] | None:
        """By direct get's subject form, `$JS.API.DIRECT.GET.<stream>.<subject>` with no body (the server refuses
        one): what is read is in the subject the server checks, so a learner's grant, its own run's keyframes,
        is all it can read. The bare form's body (seq, last_by_subj, multi_last) is invisible to permissions."""
        resp = await self.nc.request(f"$JS.API.DIRECT.GET.{stream_for(subject).name}.{subject}", b"", timeout=timeout_s)
        headers = dict(resp.headers or {})
        if not resp.data and headers.get("Status"):
            if headers["Status"] == "404":
                return None
            raise ConnectionError(f"direct get of {subject}: {headers.get('Status')} {headers.get('Description', '')}")
        return int(headers["Nats-Sequence"]), headers, resp.data

    async def request(self, subject: str, payload: bytes, *, timeout_s: float) -> bytes:
        try:
            return (await self.nc.request(subject, payload, timeout=timeout_s)).data
        except NoRespondersError:
            raise NoResponders(f"nobody serves {subject}") from None
        except NatsTimeout:
            raise TimeoutError(f"no answer on {subject} within {timeout_s:.0f}s") from None

    async def serve(self, subject: str, handler: Callable[[bytes], Awaitable[bytes]], *,
                    queue: str = "", concurrency: int = 1) -> NatsSubscription:
        """nats-py runs a subscription's callback once at a time; with `concurrency` N > 1 each request is answered in
        a task of its own, at most N at once (the rest wait in the subscription's queue), so a slow one holds back
        no other."""
        running: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(concurrency)

        async def answer(msg) -> None:
            try:
                reply = await handler(msg.data)
            except Exception:  # the requester times out; the service goes on
                log.exception("handler of %s failed", subject)
                return
            await msg.respond(reply)

        async def on_request(msg) -> None:
            if concurrency <= 1:
                await answer(msg)
                return
            await slots.acquire()
            task = asyncio.create_task(answer(msg))
            running.add(task)
            task.add_done_callback(lambda t: (running.discard(t), slots.release()))

        return NatsSubscription(await self.nc.subscribe(subject, queue=queue, cb=on_request))

    async def close(self) -> None:
        # Not drain(): every publish was acknowledged already and every consumed message acked or left
        # for redelivery, so there is nothing to wait for (drain waits on idle ordered consumers).
        if not self.nc.is_closed:
            try:
                await self.nc.close()
            except (AttributeError, OSError):  # the server went away first: nats-py then writes into a torn-down TLS
                pass                            # transport (AttributeError); there is nothing left to close

