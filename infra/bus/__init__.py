"""The bus seam: what Yeto processes may do with commands, events and streams, as a protocol.

`connect(url)` returns the NATS JetStream implementation (infra/bus/nats_bus.py); `MemoryBus`
(infra/bus/memory.py) is the same protocol in memory for pure tests. Both pass
tests/infra/test_infra_bus_contract.py. Publishing carries the message id (`Nats-Msg-Id = msg.id`);
ids are derived from the cause (`Message.caused`), so a redelivered cause republishes the same id and
the stream drops the duplicate. Publishes retry with backoff while the server is away and raise
ConnectionError after `retry_for` seconds. Stream names and subjects live in schemas/subjects.py.
"""
from __future__ import annotations

from yeto.infra.bus.types import Bus, Consumer, Deliver, Delivery, NoResponders, Subscription, subject_of

__all__ = ["Bus", "Consumer", "Deliver", "Delivery", "NoResponders", "Subscription", "connect", "subject_of"]


async def connect(url: str, *, name: str = "yeto", connect_timeout: float = 10.0) -> Bus:
    """The NATS JetStream bus at `url` (nats:// or tls://, the latter pinned through $YETO_NATS_CA)."""
    from yeto.infra.bus.nats_bus import NatsBus

    return await NatsBus.connect(url, name=name, connect_timeout=connect_timeout)
