"""A learner whose bus is gone looks for a moved head promptly, then backs off (learners/transport/rendezvous.py).

It read the rendezvous only once its bus had been away 20 s: a replacement head named 4.0 s after its predecessor's
loss merged its first global 28.7 s after it (tests/cloud/test_cloud_head_recover.py, 2026-12-06). Now the first read
comes once the bus is away FOLLOW_S (1 s), then after gaps doubled up to READ_EVERY_S (5 s): from 20 s away on, no more
often than before; a process's two connections share one read. The follow to a new address over TLS:
tests/cloud/test_cloud_head_rendezvous.py."""
from __future__ import annotations

import asyncio
from itertools import islice, takewhile
from pathlib import Path

import pytest

from waiting import until
from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.head import mirror, rendezvous
from yeto.infra.nats.server import NatsServer
from yeto.learners.transport import rendezvous as follower

RUN = "r-follow"
pytestmark = pytest.mark.timeout(60)


def test_the_first_read_comes_a_second_after_the_bus_went_away_then_the_reads_back_off_to_every_five_seconds():
    assert list(islice(follower.read_after(), 8)) == [1, 2, 4, 8, 13, 18, 23, 28]
    old = [20 + 5 * k for k in range(200)]            # before: once away 20 s, then every 5 s

    def within(at: list[float], start: float, end: float) -> int:
        return sum(1 for t in at if start <= t < end)
    new = list(takewhile(lambda t: t < 1000, follower.read_after()))
    assert new[0] == follower.FOLLOW_S and within(new, 0, 20) == 6 and within(old, 0, 20) == 0
    for start in range(20, 900, 7):                   # past the first 20 s, never more often than before
        assert within(new, start, start + 60) <= within(old, start, start + 60) + 1
    assert follower.read_after(0.3, 0.1).__next__() == 0.3      # what the tests' followers are given


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Where each read of a rendezvous went to the store, from now on."""
    made: list[str] = []
    real = follower.read
    monkeypatch.setattr(follower, "read", lambda where, *rest: made.append(where) or real(where, *rest))
    return made


def test_a_processs_two_connections_share_one_read_of_the_store(tmp_path, reads):
    where = rendezvous.place(str(tmp_path / "store" / "artifact"), RUN)
    for _ in range(2):                                 # none there yet: said why, once read
        with pytest.raises(ValueError, match="does not exist"):
            follower.read_shared(where, RUN, "tls", fresh_s=3600)
    assert len(reads) == 1
    rendezvous.publish(str(Path(where).parent), RUN, "tls://10.0.0.3:4222", now=1.0)
    assert follower.read_shared(where, RUN, "tls", fresh_s=0) == "tls://10.0.0.3:4222"       # read again
    assert follower.read_shared(where, RUN, "tls", fresh_s=3600) == "tls://10.0.0.3:4222"
    assert len(reads) == 2


async def test_a_rendezvous_naming_the_address_retried_already_is_read_but_said_only_once_the_bus_is_away_a_while(
        tmp_path, reads, capfd):
    """The head restarting where it was (or its replacement not named yet): the reads leave the connection retrying
    it, without a line for a short absence; one line once the bus is away `quiet_s`; back when the server is."""
    srv = NatsServer(tmp_path / "nats").start()
    output = str(tmp_path / "store" / "artifact")
    root, where = mirror.mirror_root(output, RUN), rendezvous.place(output, RUN)
    Path(root).mkdir(parents=True)
    rendezvous.publish(root, RUN, srv.url, now=1.0)
    bus = await NatsBus.connect(srv.url, name="learner-test")
    following = asyncio.ensure_future(follower.follow(bus.nc, where, RUN, srv.url, follow_s=0.05, read_every_s=0.1,
                                                      check_s=0.02, quiet_s=3600))
    loud = None
    try:
        srv.stop()
        await until(lambda: len(reads) >= 3, 20, "three reads of the rendezvous while the bus is away")
        assert "retried already" not in capfd.readouterr().err
        following.cancel()
        loud = asyncio.ensure_future(follower.follow(bus.nc, where, RUN, srv.url, follow_s=0.05, read_every_s=0.1,
                                                     check_s=0.02, quiet_s=0.0))
        await until(lambda: len(reads) >= 5, 20, "two more reads")
        srv.start()
        await until(lambda: bus.nc.is_connected, 20, "the connection back at the same address")
    finally:
        for task in (following, loud):
            if task is not None:
                task.cancel()
        await bus.close()
        srv.stop()
    err = capfd.readouterr().err
    assert err.count(f"unusable (it names {srv.url}, the address retried already): retrying {srv.url}") == 1, err
