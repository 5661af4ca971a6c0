"""One syncer per shard at a time on a head over several VMs: a lease on the bus, a standby that takes it over when it
lapses, and a fence that keeps a syncer which lost it from publishing (docs/CLUSTER.md).

The lease is one subject, `yeto.snap.lease.<the shard's durable consumer>`, in a stream keeping its newest message
with as many copies as the event stream (`YETO_LEASE`). Every write is a compare-and-set: a publish that expects the
subject's last sequence (`Nats-Expected-Last-Subject-Sequence`) the writer last saw, which the stream refuses when
another write came between (`WRONG_LAST_SEQUENCE`).

- The holder renews every RENEW_S (its own last sequence expected). A renewal refused means another syncer took
  it: LeaseLost, and the service ends (a background task's error ends it).
- A syncer without it (the standby, or any syncer starting) watches the subject and takes the lease when the
  subject's sequence stayed the same for LEASE_S of its own clock, counted from the last read the stream answered
  within RENEW_S (a read held up by an election restarts it: the holder could not renew meanwhile either), or when
  there is none (the sequence it saw expected: of two standbys one wins).
- The fence: the holder publishes (a broadcast chunk, an event, a replicated snapshot's head) only within FRESH_S of
  sending a renewal the stream accepted, each try of a publish retried through an election fenced again; past that
  it renews first, and a refusal is LeaseLost.
- Each write says who holds it: the instance, its node (`--lease-node`) and whether it took the lease from a holder on
  another node; then the shard has no standby left, and the head node that runs none of its syncers starts one
  (infra/stack/standby.py, from that node's supervisor).
- On taking over, the new holder keeps the shard's durable fragment consumer (takeover.py): the pushes the old holder
  fetched and never acknowledged come back after its ack wait (4 s), with no request to JetStream's meta leader.

Why two holders never publish for the same shard. Let the old holder send its last accepted renewal at r (its clock),
stored at s >= r and read by the standby at o >= s. The standby writes no sooner than o + LEASE_S (its clock; an
election only postpones it), and that write makes any later renewal of the old holder's fail (compare-and-set: the
subject's last sequence moved). The old holder's fence passes only before r + FRESH_S <= o + FRESH_S, so every try it
sends leaves at least LEASE_S - FRESH_S before the taker's first publish:

    takeover - last fenced send >= (o + LEASE_S) - (r + FRESH_S) >= LEASE_S - FRESH_S = 2 s

A try is stored when it reaches a stream leader (a stream electing one drops it; it is not queued), so the old holder's
publishes land before the new holder's unless one spends more than LEASE_S - FRESH_S between its fence and a leader
(SIGSTOP, a frozen VM or a stalled link at that instant): left open. The two clocks only measure durations
(monotonic); their rates differ by far less than the margin over LEASE_S.

LEASE_S is 4 s (6 s at f4f4797): the issue's target is a merged global within 10 s of a VM's loss, and a takeover costs
the lapse (LEASE_S less up to RENEW_S since the last renewal), the old holder's pushes back and the next round. The holder
keeps the Raft leaders it merges through off its own VM (leaders.py), so the lease's stream elects no leader when
the holder's VM is lost; when another VM that led it is lost, neither the holder's renewals nor the standby's reads
are answered during the election (1.9 to 7.0 s after a kill in the rehearsals), and the standby's lapse starts
again once they are: an election hands the lease over only if the holder stays silent LEASE_S after it, never to two
at once.
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

    async def _write(self, expected: int) -> bool:
        """Compare-and-set the lease to this holder; False when another write came after `expected`."""
        from nats.js.errors import APIError

        sent = time.monotonic()
        body = json.dumps({"holder": self.holder, "node": self.node, "took_over": self.took_over}).encode()
        try:
            ack = await self.js.publish(self.subject, body, stream=STREAM, timeout=FRESH_S / 2,
                                        headers={"Nats-Expected-Last-Subject-Sequence": str(expected)})
        except APIError as e:
            if e.err_code == WRONG_LAST_SEQUENCE:
                return False
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
                    if await self._try(self._write(seq)):
                        self.held.set()
                        log.info("syncer %s holds the lease %s (sequence %d, unchanged %.1fs before)", self.holder,
                                 self.subject, self.seq, time.monotonic() - since)
                        return seq > 0
            await asyncio.sleep(WATCH_S)        # a poll of the lease subject: the lapse is a time, not an event

    async def _try(self, write) -> bool:
        """A write that may time out during an election: False (not taken) rather than an error."""
        from yeto.infra.bus.nats_bus import retryable

        try:
            return await write
        except Exception as e:
            if retryable(e):
                return False
            raise

    async def renew(self) -> None:
        """One renewal; LeaseLost when another holder took it. A renewal the stream does not answer (an election)
        is left for the next one, and the fence holds publishes back meanwhile."""
        async with self.lock:
            if self.lost:
                raise LeaseLost(f"syncer {self.holder} lost the lease {self.subject}")
            try:
                ok = await self._write(self.seq)
            except Exception as e:
                from yeto.infra.bus.nats_bus import retryable

                if retryable(e):
                    return
                raise
            if not ok:
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
