"""One syncer per shard at a time on a head over several VMs: a lease on the bus, a standby that takes it over when it
lapses, and a fence that keeps a syncer which lost it from publishing (docs/CLUSTER.md, with the measurements).

The lease is one subject, `yeto.snap.lease.<the shard's durable consumer>`, in a stream keeping its newest message
with as many copies as the event stream (`YETO_LEASE`). Every write is a compare-and-set: a publish that expects the
subject's last sequence (`Nats-Expected-Last-Subject-Sequence`) the writer last saw, refused (`WRONG_LAST_SEQUENCE`)
when another write came between. Each says who holds it: the instance, its node (`--lease-node`) and whether it took
the lease from a holder on another node (then the shard has no standby left: infra/stack/standby.py starts one).

- The holder renews every RENEW_S; a renewal refused means another syncer took it: LeaseLost, the service ends.
- A syncer without it watches the subject and takes the lease when its sequence stayed the same for LEASE_S of its own
  clock, counted from the last read the stream answered within RENEW_S (a read held up by an election restarts it:
  the holder could not renew meanwhile either), or when there is none (of two standbys one wins).
- The fence: the holder publishes only within FRESH_S of sending a renewal the stream accepted, each try of a publish
  retried through an election fenced again (fenced.py); past that it renews first. Its held pushes are kept alive only
  as long (held.py), and the taker keeps the shard's consumer, whose ack wait brings them back (takeover.py).

Why two holders never publish for the same shard: the old holder's last accepted renewal is sent at r (its clock),
stored at s >= r and read by the standby at o >= s. The standby writes no sooner than o + LEASE_S (an election only
postpones it), after which every renewal of the old holder is refused, and the old holder's fence passes only before
r + FRESH_S <= o + FRESH_S:

    takeover - last fenced send >= (o + LEASE_S) - (r + FRESH_S) >= LEASE_S - FRESH_S = 2 s

A try is stored when it reaches a stream leader (a stream electing one drops it), so the old holder's publishes land
first unless one spends more than those 2 s between its fence and a leader (SIGSTOP, a frozen VM or a stalled link at
that instant): left open. The clocks only measure durations (monotonic). LEASE_S is 4 s for the target of a merged
global within 10 s of a VM's loss; the holder keeps the leaders it merges through off its VM (leaders.py), so an
election on the takeover's path is another VM's, which holds up the standby's reads as long as the holder's renewals.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time

from yeto.infra.bus.snapshot_store import LEASE_PREFIX, LEASE_STREAM, ensure_stream, replicas_of, retrying

log = logging.getLogger(__name__)

STREAM, PREFIX = LEASE_STREAM, LEASE_PREFIX
LEASE_S = 4.0
RENEW_S = LEASE_S / 4
FRESH_S = LEASE_S / 2
WATCH_S = 0.25              # how often a standby reads the lease
WRONG_LAST_SEQUENCE = 10071


class LeaseLost(RuntimeError):
    pass


class Lease:
    """The lease of the shard whose durable fragment consumer is `name`, sought by syncer instance `holder` on the
    head node `node` (its nats-server's name; "" where not known)."""

    def __init__(self, nc, replicas: int, name: str, holder: str, node: str = ""):
        self.nc, self.replicas, self.name, self.holder, self.node = nc, replicas, name, holder, node
        self.js = nc.jetstream(timeout=5.0)
        self.took_over = False              # taken from a holder on another node: the shard has no standby left
        self.subject = f"{PREFIX}.{name}"
        self.seq = 0                        # the sequence of this holder's last accepted write
        self.renewed_at = float("-inf")     # when that write was sent (monotonic)
        self.held = asyncio.Event()
        self.lost = False
        self.lock = asyncio.Lock()

    @classmethod
    async def of(cls, bus, name: str, holder: str, node: str = "") -> Lease | None:
        """The lease on `bus` where its event stream has more than one copy (a head over several VMs), else None."""
        replicas = await replicas_of(bus)
        if replicas <= 1:
            return None
        await ensure_stream(bus.js, STREAM, f"{PREFIX}.>", replicas, 64 * 1024)
        return cls(bus.nc, replicas, name, holder, node)

    async def last(self) -> tuple[int, dict]:
        """The lease's last sequence (0: never written) and what its writer wrote."""
        from nats.js.errors import NotFoundError

        try:
            msg = await retrying(lambda: self.js.get_last_msg(STREAM, self.subject))
        except NotFoundError:
            return 0, {}
        return msg.seq or 0, json.loads(msg.data)

    async def _write(self, expected: int) -> bool | None:
        """Compare-and-set the lease to this holder; False when another write came after `expected`, None when the
        stream did not answer (an election)."""
        from nats.js.errors import APIError

        from yeto.infra.bus.nats_bus import retryable

        sent = time.monotonic()
        body = json.dumps({"holder": self.holder, "node": self.node, "took_over": self.took_over}).encode()
        try:
            ack = await self.js.publish(self.subject, body, stream=STREAM, timeout=FRESH_S / 2,
                                        headers={"Nats-Expected-Last-Subject-Sequence": str(expected)})
        except Exception as e:
            if isinstance(e, APIError) and e.err_code == WRONG_LAST_SEQUENCE:
                return False
            if retryable(e):
                return None
            raise
        self.seq, self.renewed_at = ack.seq, sent
        return True

    async def acquire(self, on_watch=None) -> bool:
        """Wait until the lease is free or lapsed (its sequence unchanged for LEASE_S of reads the stream answered),
        then take it; whether another holder had it. `on_watch()` is called at every read (the standby's warm-up)."""
        seen, since = -1, time.monotonic()
        while True:
            if on_watch is not None:
                on_watch()
            asked = time.monotonic()
            seq, body = await self.last()
            if time.monotonic() - asked >= RENEW_S:     # the stream did not answer (an election): nor could the
                since = time.monotonic()                # holder renew, so its lapse counts from the answer
            if seq != seen:
                seen, since = seq, time.monotonic()
            if seq == 0 or time.monotonic() - since >= LEASE_S:
                async with self.lock:
                    self.took_over = seq > 0 and body.get("node") != self.node
                    if await self._write(seq):
                        self.held.set()
                        log.info("syncer %s holds the lease %s (sequence %d, unchanged %.1fs before)", self.holder,
                                 self.subject, self.seq, time.monotonic() - since)
                        return seq > 0
            await asyncio.sleep(WATCH_S)        # a poll of the lease subject: the lapse is a time, not an event

    async def renew(self) -> None:
        """One renewal; LeaseLost when another holder took it. A renewal the stream does not answer (an election)
        is left for the next one, and the fence holds publishes back meanwhile."""
        async with self.lock:
            if self.lost:
                raise LeaseLost(f"syncer {self.holder} lost the lease {self.subject}")
            if await self._write(self.seq) is False:
                self.lost = True
                self.held.clear()
                raise LeaseLost(f"syncer {self.holder}: another syncer took the lease {self.subject}")

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew every RENEW_S until stopped; LeaseLost when it was taken."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), RENEW_S)
            except asyncio.TimeoutError:
                await self.renew()

    def fresh(self) -> bool:
        """Whether a renewal accepted less than FRESH_S ago stands (what the fence waits for)."""
        return not self.lost and time.monotonic() - self.renewed_at < FRESH_S

    async def fence(self) -> None:
        """Return once a renewal accepted less than FRESH_S ago stands; LeaseLost when the lease was taken."""
        while not self.fresh():
            await self.renew()
            if not self.fresh():
                await asyncio.sleep(0.2)        # the stream did not answer (an election): ask again
