"""The one way Yeto processes publish and consume: commands and events over NATS JetStream.

Publishing carries `Nats-Msg-Id = msg.id`; ids are derived from the cause (`Message.caused`), so a
redelivered cause republishes the same id and JetStream drops the duplicate. Publishes retry with
backoff while the server is away (a restart under load loses no acknowledged event).
"""
from __future__ import annotations

import asyncio
import logging

import nats
from nats.errors import ConnectionClosedError, NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import ServiceUnavailableError

from yeto.schemas.base import Command, Message, to_bytes
from yeto.schemas.subjects import command_subject, event_subject

log = logging.getLogger(__name__)
RETRYABLE = (NatsTimeout, asyncio.TimeoutError, NoRespondersError, ServiceUnavailableError, ConnectionClosedError)


def subject_of(msg: Message) -> str:
    if isinstance(msg, Command):
        assert msg.owner, f"{msg.type} has no owning service"
        return command_subject(msg.owner, msg.type)
    return event_subject(msg.run_id, msg.type)


async def _log_error(e: Exception) -> None:
    log.warning("nats: %s", e)


class Bus:
    """A NATS connection and its JetStream context, with Yeto's publish rules."""

    def __init__(self, nc, name: str):
        self.nc, self.js, self.name = nc, nc.jetstream(timeout=5.0), name

    @classmethod
    async def connect(cls, url: str, *, name: str = "yeto", connect_timeout: float = 10.0) -> "Bus":
        deadline = asyncio.get_running_loop().time() + connect_timeout
        tls = None
        if url.startswith("tls://"):  # a head VM's self-signed certificate, pinned through $YETO_NATS_CA
            import os
            import ssl

            tls = ssl.create_default_context(cafile=os.environ.get("YETO_NATS_CA") or None)
            tls.check_hostname = False
        while True:
            try:
                nc = await nats.connect(url, name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                                        connect_timeout=2, allow_reconnect=True, error_cb=_log_error, tls=tls)
                return cls(nc, name)
            except (OSError, NatsTimeout, nats.errors.NoServersError):
                if asyncio.get_running_loop().time() > deadline:
                    raise ConnectionError(f"cannot reach NATS at {url}: is the stack up? (`yeto stack up`)") from None
                await asyncio.sleep(0.2)

    async def publish(self, msg: Message, *, retry_for: float = 60.0) -> int:
        """Publish and wait for JetStream's ack; returns the stream sequence (or the original one if duplicate)."""
        return await self.publish_raw(subject_of(msg), to_bytes(msg), msg_id=msg.id, retry_for=retry_for)

    async def publish_raw(self, subject: str, payload: bytes, *, msg_id: str | None = None,
                          headers: dict[str, str] | None = None, retry_for: float = 60.0) -> int:
        hdrs = dict(headers or {})
        if msg_id:
            hdrs["Nats-Msg-Id"] = msg_id
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + retry_for, 0.05
        while True:
            try:
                ack = await self.js.publish(subject, payload, headers=hdrs or None)
                return ack.seq
            except RETRYABLE as e:
                if loop.time() > deadline:
                    raise ConnectionError(f"publish to {subject} failed for {retry_for:.0f}s: {e!r}") from e
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def direct_get(self, stream: str, seq: int, *, timeout: float = 120.0) -> tuple[dict[str, str], bytes] | None:
        """One stored message by sequence, payload raw (not base64 as the STREAM.MSG.GET API sends it); None
        if the stream no longer holds it. The timeout is long: a 4 MiB chunk over a slow link takes seconds."""
        import json

        resp = await self.nc.request(f"$JS.API.DIRECT.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=timeout)
        headers = dict(resp.headers or {})
        if not resp.data and headers.get("Status"):
            if headers["Status"] == "404":
                return None
            raise ConnectionError(f"direct get of {stream} #{seq}: {headers.get('Status')} {headers.get('Description', '')}")
        return headers, resp.data

    async def close(self) -> None:
        # Not drain(): every publish was acknowledged already and every consumed message acked or left
        # for redelivery, so there is nothing to wait for (drain waits on idle ordered consumers).
        if not self.nc.is_closed:
            await self.nc.close()
