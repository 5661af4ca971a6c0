"""The syncer's snapshots off its VM, on a real three-node nats-server cluster (streams R3): each snapshot a syncer
writes is also put into the replicated store (infra/bus/snapshot_store.py) before its pushes are acknowledged, and a
syncer on another VM (an empty state folder) restores from it, with a node of the cluster killed in between; a put
cut short leaves the previous snapshot whole; a single server (one copy) keeps nothing there. The lease
(services/syncer/lease.py): a standby takes it only once its holder stops renewing, the old holder's publishes are
fenced after that, and the shard's pushes the old holder fetched come back to the new one, on the consumer it kept,
after its short ack wait while JetStream's meta leader is still elected (services/syncer/takeover.py); the holder moves
the leaders it merges through off its node (services/syncer/leaders.py); after a takeover from another node a new
standby starts on the node with none (infra/stack/standby.py)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import NotFoundError, ServiceUnavailableError

from waiting import until, until_answered
from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.bus.snapshot_store import PUT_HEADER, STREAM, SnapshotStore, chunk_subject, retrying
from yeto.infra.nats import cluster as natscluster
from yeto.schemas import codecs, parse
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.schemas.subjects import (
    EVT_STREAM,
    FRAG_STREAM,
    GDELTA_STREAM,
    GKEY_STREAM,
    event_subject,
    fragment_subject,
    keyframe_subject,
)
from yeto.services.syncer import snapshot
from yeto.services.syncer.dataplane import DataPlane
from yeto.services.syncer.fenced import FencedBus
from yeto.services.syncer.lease import LEASE_S, RENEW_S, Lease, LeaseLost
from yeto.services.syncer.runs import RunInfo

RUN, N, FP = "r-repl", 3000, "e" * 64
SYNC = {"quorum": 2, "grace_max_s": 0.0, "snapshot_every": 1}
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path):
    """Three nats-servers routed on loopback, the streams R3; (servers, url)."""
    (tmp_path / "logs").mkdir()
    servers = natscluster.cluster_servers(tmp_path / "nats", 3, users_file=None, logs=tmp_path / "logs")
    for s in servers.values():
        s.start()
    url = natscluster.cluster_url(servers)
    await natscluster.ready(url, natscluster.replicas(3))
    yield servers, url
    for s in servers.values():
        s.stop()


async def send(bus, learner: str, kind: str, codec: str, values: np.ndarray, **fields) -> None:
    payload = codecs.codec(codec).encode(values)
    header = FragmentHeader(run_id=RUN, learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=N,
                            sha256=sha256(payload), **fields)
    for h, chunk in split_chunks(header, payload, chunk_bytes=1024):
        await bus.publish_raw(fragment_subject(RUN, 0, learner), chunk, headers=h.to_nats())


async def led(bus) -> bool:
    try:
        streams = [(await bus.js.stream_info(name)).cluster.leader
                   for name in (EVT_STREAM, FRAG_STREAM, GKEY_STREAM, GDELTA_STREAM, STREAM)]
        return all(streams) and bool((await bus.js.consumer_info(FRAG_STREAM, "syncer")).cluster.leader)
    except Exception:  # noqa: BLE001 - no answer while the cluster elects: not yet
        return False


async def last_event(bus, type_: str):
    """The run's newest event of `type_`, asked again while a request times out (the cluster electing after the kill)."""
    for attempt in range(10):
        try:
            found = await bus.last(event_subject(RUN, type_))
            break
        except NatsTimeout:
            if attempt == 9:
                raise
    return None if found is None else parse(found[1])


async def test_a_syncer_on_another_vm_restores_the_newest_snapshot_from_the_replicated_store(tmp_path, cluster):
    servers, url = cluster
    bus = await NatsBus.connect(url, name="test-syncer")
    runs = {RUN: RunInfo(sync=SYNC, generations={"l0": 0, "l1": 0})}
    try:
        first = DataPlane(state_dir=tmp_path / "vm-1")
        init = np.random.default_rng(1).standard_normal(N).astype(np.float32)
        for learner in ("l0", "l1"):
            await send(bus, learner, "init", "f32", init)
            await send(bus, learner, "push", "q4", np.full(N, 0.1, np.float32), local_step=4, c_tokens=10)
        await first.open(bus)
        while (await last_event(bus, "RoundMerged")) is None:
            await first.take_in(bus, lambda: runs, timeout_s=1.0)
        await first.settle()                            # the round's snapshot written, put, its pushes acknowledged
        local = snapshot.read_all(tmp_path / "vm-1" / "syncer" / RUN)[0]
        store = await SnapshotStore.of(bus)
        assert store is not None and store.replicas == 3
        assert (await bus.js.stream_info(STREAM)).config.num_replicas == 3
        head = await store.head(RUN, 0)
        assert head["version"] == local.version == 1 and head["sha256"] == snapshot_sha(tmp_path / "vm-1", local)

        leader = (await bus.js.stream_info(STREAM)).cluster.leader      # the store's leader goes with the VM
        victim = next(s for k, s in enumerate(servers.values()) if f"yeto-{k}" == leader)
        victim.kill()
        await first.consumer.close()
        await until_answered(lambda: led(bus), 60, "a leader of every stream the syncer uses after the kill")

        second = DataPlane(state_dir=tmp_path / "vm-2")                # another VM: nothing in its folder
        await send(bus, "l0", "push", "q4", np.full(N, 0.2, np.float32), local_step=8, base_version=1, c_tokens=10)
        await second.open(bus)
        while (await last_event(bus, "FragmentRestored")) is None:
            await second.take_in(bus, lambda: runs, timeout_s=1.0)
        restored = await last_event(bus, "FragmentRestored")
        assert (restored.snapshot_version, restored.published_version, restored.global_version) == (1, 1, 1)
        fetched = snapshot.read_all(tmp_path / "vm-2" / "syncer" / RUN)[0]
        assert np.array_equal(fetched.theta, local.theta) and np.array_equal(fetched.momentum, local.momentum)
        assert set(local.ledger) == {"l0", "l1"} and fetched.ledger == local.ledger   # its replays refused
        headers, _ = await bus.last(keyframe_subject(RUN, 0, 0))
        assert FragmentHeader.from_nats(headers).version == 1          # what went out: its keyframe again
        await second.settle()
        await second.consumer.close()
    finally:
        await bus.close()


def snapshot_sha(state: object, snap: snapshot.FragmentSnapshot) -> str:
    import hashlib

    return hashlib.sha256(snapshot.path_of(state / "syncer" / RUN, snap.fragment).read_bytes()).hexdigest()


async def test_a_put_cut_short_leaves_the_previous_snapshot_whole_and_a_foreign_chunk_is_refused(tmp_path, cluster):
    _, url = cluster
    bus = await NatsBus.connect(url, name="test-store")
    try:
        store = await SnapshotStore.of(bus)
        snap = snapshot.FragmentSnapshot(fragment=3, version=7, fingerprint=FP, theta=np.arange(10, dtype=np.float32),
                                         momentum=np.zeros(10, np.float32), shadow=np.ones(10, np.float32))
        path, sha = snapshot.write(tmp_path / "a", snap)
        manifest = await store.put(RUN, 3, 7, path)
        assert manifest["sha256"] == sha and await store.fragments(RUN) == [3]
        # the next put dies after a chunk into the other slot, before its head: the old one is still read whole
        await bus.js.publish(chunk_subject(RUN, 3, 1 - manifest["slot"], 0), b"torn", stream=STREAM,
                             headers={PUT_HEADER: "a-put-that-died"})
        got = await store.get(RUN, 3, tmp_path / "b" / "frag-0003.safetensors")
        assert got == manifest and snapshot.read_all(tmp_path / "b")[3].version == 7
        # a chunk of the named slot that is not of the named put (overwritten, or forged): refused, nothing written
        await bus.js.publish(chunk_subject(RUN, 3, manifest["slot"], 0), b"forged", stream=STREAM,
                             headers={PUT_HEADER: "another"})
        with pytest.raises(ValueError, match="not of the put its head names"):
            await store.get(RUN, 3, tmp_path / "c" / "frag-0003.safetensors")
        assert not list((tmp_path / "c").glob("*"))
    finally:
        await bus.close()


async def test_a_single_server_head_keeps_nothing_in_the_replicated_store_and_has_no_lease(bus):
    assert await SnapshotStore.of(bus) is None and await Lease.of(bus, "syncer", "syncer") is None
    streams = await bus.js.streams_info()
    assert STREAM not in {s.config.name for s in streams}


async def test_a_standby_takes_the_lease_only_once_its_holder_stops_renewing_and_the_old_holder_is_fenced(cluster):
    _, url = cluster
    bus = await NatsBus.connect(url, name="test-lease")
    try:
        active, standby = (await Lease.of(bus, "syncer", "syncer"), await Lease.of(bus, "syncer", "syncer-standby"))
        assert await active.acquire() is False          # nobody held it
        assert active.held.is_set() and (await bus.js.stream_info("YETO_LEASE")).config.num_replicas == 3
        renewals, stop = [], asyncio.Event()
        renew = active.renew

        async def counted() -> None:
            await renew()
            renewals.append(active.seq)
            if len(renewals) == 10:
                stop.set()                  # the holder stops renewing (paused, or its VM gone)
        active.renew = counted
        taking = asyncio.create_task(standby.acquire())
        await active.keep(stop)             # ten renewals, 10 RENEW_S: more than twice the lease
        assert not taking.done(), "the standby took a lease its holder was renewing"
        assert await asyncio.wait_for(taking, 4 * LEASE_S) is True      # taken from a holder
        assert standby.held.is_set() and standby.seq > renewals[-1]
        fenced = FencedBus(bus, active)                 # the old holder resumes: its next publish is refused
        with pytest.raises(LeaseLost):
            await fenced.publish_raw(event_subject(RUN, "Stale"), b"x")
        assert await bus.last(event_subject(RUN, "Stale")) is None
        await standby.fence()                           # the new holder publishes on
    finally:
        await bus.close()


async def test_a_new_holder_keeps_the_consumer_and_gets_the_old_holders_pushes_while_the_meta_leader_is_elected(
        tmp_path, cluster):
    import time

    from yeto.services.syncer import takeover

    servers, url = cluster
    bus = await NatsBus.connect(url, name="test-takeover")
    stop = asyncio.Event()
    try:
        filters, durable = [fragment_subject(RUN, 0, "*")], "syncer-lease-test"
        old = await bus.consumer(filters, durable=durable, ack_wait_s=30)       # made before the short ack wait
        await takeover.keep_ack_wait(bus.js, durable, stop)                     # updated in place (the meta leader)
        made = await bus.js.consumer_info(FRAG_STREAM, durable)
        assert made.config.ack_wait == takeover.ACK_WAIT_S
        meta = (await until(lambda: meta_leader(tmp_path / "logs"), 30, "JetStream's meta leader in the logs"))[0]
        await until_answered(lambda: led_off(bus, meta, durable), 60, f"the pushes' groups led off {meta}")
        await bus.publish_raw(fragment_subject(RUN, 0, "l0"), b"a push")
        assert [d.data for d in await old.fetch(1, timeout_s=5)] == [b"a push"]    # fetched, never acknowledged
        next(s for k, s in enumerate(servers.values()) if f"yeto-{k}" == meta).kill()     # the old holder's VM
        killed = time.time()
        new = await retrying(lambda: bus.consumer(filters, durable=durable, ack_wait_s=takeover.ACK_WAIT_S))  # binds
        got = await until_answered(lambda: new.fetch(1, timeout_s=1.0), 60, "the old holder's push delivered again")
        came = time.time() - killed
        assert [d.data for d in got] == [b"a push"]
        await got[0].ack()
        kept = await retrying(lambda: bus.js.consumer_info(FRAG_STREAM, durable))
        assert kept.created == made.created, "the consumer was made again"
        elected = await until(lambda: meta_leader(tmp_path / "logs", after=killed), 60, "a new meta leader")
        print(f"the push came back {came:.1f}s after the meta leader's node was killed; a new meta leader "
              f"{elected[1] - killed:.1f}s after it")       # measured, not asserted: both are elections and ack waits
    finally:
        stop.set()
        await bus.close()


def meta_leader(logs, after: float = 0.0) -> tuple[str, float] | None:
    """The newest JetStream meta leader the nodes' logs name after `after` (epoch seconds), with when."""
    import re
    import time

    found = []
    for path in logs.glob("nats-server-*.log"):
        for line in path.read_text(errors="replace").splitlines():
            m = re.match(r"^\[\d+\] (\S+ \S+) \[INF\] (?:JetStream cluster new metadata leader: (\S+)/|Self is new JetStream "
                         r"cluster metadata leader)", line)
            if m:
                stamp, frac = m[1].split(".")
                at = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float(f"0.{frac}")
                found.append((at, m[2] or f"yeto-{path.stem.rsplit('-', 1)[1]}"))
    newest = max((f for f in found if f[0] > after), default=None)
    return None if newest is None else (newest[1], newest[0])


async def led_off(bus, node: str, durable: str) -> bool:
    """Whether the fragment stream and the consumer `durable` are led by another node than `node`; each asked to step
    down while it is not."""
    try:
        for group, subject in ((await bus.js.stream_info(FRAG_STREAM), f"$JS.API.STREAM.LEADER.STEPDOWN.{FRAG_STREAM}"),
                               (await bus.js.consumer_info(FRAG_STREAM, durable),
                                f"$JS.API.CONSUMER.LEADER.STEPDOWN.{FRAG_STREAM}.{durable}")):
            if group.cluster.leader in (None, node):
                if group.cluster.leader == node:
                    await bus.nc.request(subject, b"", timeout=2.0)
                return False
    except (NatsTimeout, ServiceUnavailableError):       # electing
        return False
    return True


def test_a_head_over_three_vms_runs_each_syncer_shard_leased_with_a_standby_on_the_next_node(tmp_path):
    from yeto.infra.stack import StackPaths, _commands

    paths = StackPaths(tmp_path)
    for syncers in (1, 3):
        rec = {"syncers": syncers, "cluster": 3, "peers": ["10.9.0.2", "10.9.0.3", "10.9.0.4"], "run_id": RUN}
        nodes = [_commands({**rec, "node": k}, paths, "tls://x:4222") for k in range(3)]
        syncer_nodes = {name: k for k, cmds in enumerate(nodes) for name in cmds if name.startswith("syncer")}
        shards = ["syncer"] if syncers == 1 else [f"syncer-{k}" for k in range(3)]
        assert set(syncer_nodes) == set(shards) | {f"{s}-standby" for s in shards}
        for shard in shards:
            assert syncer_nodes[f"{shard}-standby"] == (syncer_nodes[shard] + 1) % 3     # another VM
            active, standby = nodes[syncer_nodes[shard]][shard], nodes[syncer_nodes[f"{shard}-standby"]][f"{shard}-standby"]
            # each names its own VM's server, which the lease's holder keeps leaders off (services/syncer/leaders.py)
            assert active[-3:] == ["--lease", "--lease-node", f"yeto-{syncer_nodes[shard]}"]
            assert standby[-5:] == ["--lease", "--lease-node", f"yeto-{syncer_nodes[f'{shard}-standby']}",
                                    "--instance", f"{shard}-standby"]
    single = _commands({"syncers": 1}, paths, "nats://127.0.0.1:4222")      # one VM: unchanged
    assert "--lease" not in single["syncer"] and not [n for n in single if n.endswith("-standby")]


async def test_lease_on_a_single_server_is_refused_with_a_sentence(tmp_path, bus):
    from types import SimpleNamespace

    from yeto.services.syncer.wiring import spec

    service = spec(DataPlane(state_dir=tmp_path), leased=True)
    with pytest.raises(ValueError, match="--lease: the bus keeps one copy"):
        await service.background[0](SimpleNamespace(bus=bus, state=None, stop=asyncio.Event()))


async def test_a_lease_holder_moves_every_leader_it_merges_through_off_its_own_node(cluster):
    from yeto.services.syncer import leaders

    _, url = cluster
    bus = await NatsBus.connect(url, name="test-leaders")
    stop = asyncio.Event()
    try:
        await Lease.of(bus, "syncer", "syncer")                 # the lease's stream
        await (await SnapshotStore.of(bus))._ensure()           # the replicated snapshots' stream
        await bus.consumer([fragment_subject(RUN, 0, "*")], durable="syncer")
        node = (await bus.js.stream_info(FRAG_STREAM)).cluster.leader      # it leads one group at least
        assert f"$JS.API.STREAM.LEADER.STEPDOWN.{FRAG_STREAM}" in await leaders.led_by(bus.js, node, "syncer")
        keeping = asyncio.create_task(leaders.keep_off(bus, node, "syncer", stop))

        async def others_lead() -> list[str] | None:
            try:
                leads = [(await bus.js.stream_info(s)).cluster.leader for s in leaders.STREAMS]
                leads.append((await bus.js.consumer_info(FRAG_STREAM, "syncer")).cluster.leader)
            except (NatsTimeout, ServiceUnavailableError):   # a group electing its new leader (503 meanwhile)
                return None
            return leads if all(leads) and node not in leads else None
        await until_answered(others_lead, 60, f"every group of the syncer's led by another node than {node}")
        assert not await leaders.led_by(bus.js, node, "syncer")
        stop.set()
        await keeping
    finally:
        stop.set()
        await bus.close()


async def test_an_election_of_the_lease_stream_hands_nothing_over_while_its_holder_lives(cluster):
    servers, url = cluster
    bus = await NatsBus.connect(url, name="test-lease-election")
    stop = asyncio.Event()
    try:
        active, standby = (await Lease.of(bus, "syncer", "syncer"), await Lease.of(bus, "syncer", "syncer-standby"))
        assert await active.acquire() is False
        keeping = asyncio.create_task(active.keep(stop))
        taking = asyncio.create_task(standby.acquire())
        leader = (await bus.js.stream_info("YETO_LEASE")).cluster.leader
        next(s for k, s in enumerate(servers.values()) if f"yeto-{k}" == leader).kill()     # an election: 4 to 9 s
        elected = await until_answered(lambda: lease_leader(bus), 60, "a new leader of YETO_LEASE after the kill")
        assert elected != leader
        renewed = active.seq                # the holder renews again: LEASE_S of accepted renewals after the election
        await until(lambda: active.seq >= renewed + LEASE_S / RENEW_S + 1, 60, "the holder's renewals accepted again")
        assert not taking.done(), "the standby took the lease of a holder that only waited out an election"
        assert not keeping.done() and active.held.is_set()
        stop.set()
        await keeping
        taking.cancel()
    finally:
        stop.set()
        await bus.close()


async def lease_leader(bus) -> str | None:
    try:
        return (await bus.js.stream_info("YETO_LEASE")).cluster.leader
    except NatsTimeout:
        return None


def test_after_a_takeover_from_another_node_only_the_node_with_no_syncer_of_the_shard_wants_a_standby():
    from yeto.infra.stack.standby import wanted

    took = {"holder": "syncer-standby", "node": "yeto-2", "took_over": True}
    assert wanted(took, "yeto-0", {"tape", "planner-0"}) == "syncer-standby-yeto-0"
    assert wanted(took, "yeto-2", {"syncer-standby"}) is None                  # the holder's own node
    assert wanted({**took, "took_over": False}, "yeto-0", set()) is None       # its standby still stands by
    assert wanted(took, "yeto-0", {"syncer-standby-yeto-0"}) is None           # started already
    sharded = {"holder": "syncer-1-standby", "node": "yeto-0", "took_over": True}
    assert wanted(sharded, "yeto-1", {"syncer-0"}) == "syncer-1-standby-yeto-1"   # another shard's syncer stands by for none


def test_once_a_standbys_presence_lapses_the_node_with_no_syncer_of_the_shard_wants_a_standby():
    from yeto.infra.stack.standby import LAPSE_S, Presences, wanted

    lease = {"holder": "syncer", "node": "yeto-1", "took_over": False}      # its standby was node 2's
    assert wanted(lease, "yeto-0", {"tape"}, lapsed=True) == "syncer-standby-yeto-0"
    assert wanted(lease, "yeto-1", {"syncer"}, lapsed=True) is None          # the holder's own node
    assert wanted(lease, "yeto-0", {"syncer-standby-yeto-0"}, lapsed=True) is None
    seen = Presences()
    assert not seen.lapsed(lease, 7, 100.0) and not seen.lapsed(lease, 8, 100.0 + LAPSE_S)      # written on
    assert not seen.lapsed(lease, 8, 99.9 + 2 * LAPSE_S) and seen.lapsed(lease, 8, 100.0 + 2 * LAPSE_S)
    seen.unanswered(200.0)                              # an election: the standby could not write either
    assert not seen.lapsed(lease, 8, 200.0 + LAPSE_S / 2) and seen.lapsed(lease, 8, 200.0 + LAPSE_S)
    assert not Presences().lapsed(lease, 0, 0.0) and not seen.lapsed(lease, 0, 1e6)   # no standby ever: none wanted


async def test_a_takeover_from_another_node_starts_a_new_standby_that_takes_the_shard_over_in_turn(tmp_path, cluster):
    import os
    import signal

    from yeto.infra.stack import read_record
    from yeto.infra.stack.standby import keep_standbys

    _, url = cluster
    paths = node_zero(tmp_path, url)                        # node 0's stack: no syncer of the shard runs there
    bus = await NatsBus.connect(url, name="test-standby")
    stop, name, pid = asyncio.Event(), "syncer-standby-yeto-0", None
    try:
        first = await Lease.of(bus, "syncer", "syncer", "yeto-1")
        assert await first.acquire() is False and not first.took_over
        keeping = asyncio.create_task(keep_standbys(bus, paths.root, stop))
        second = await Lease.of(bus, "syncer", "syncer-standby", "yeto-2")
        assert await second.acquire() is True and second.took_over      # node 1's holder renewed no more: its VM lost
        rec = await until(lambda: (r := read_record(paths)) and name in r["pids"] and r, 30, f"{name} started on node 0")
        pid = rec["pids"][name]
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        assert argv[-6:-1] == [b"--lease", b"--lease-node", b"yeto-0", b"--instance", name.encode()]
        # a standby indeed: node 2's holder renews no more either, and the new one takes the shard over
        holder = await until_answered(lambda: lease_holder(bus), 90, f"{name} holding the lease")
        assert holder == {"holder": name, "node": "yeto-0", "took_over": True}
        assert list(read_record(paths)["pids"]) == [name]             # started once
        stop.set()
        await keeping
    finally:
        stop.set()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)          # the process this test's supervisor started, by its pid
        await bus.close()


async def test_a_standby_lost_with_its_vm_is_replaced_on_the_node_with_no_syncer_of_the_shard(tmp_path, cluster):
    import json
    import os
    import signal

    from yeto.infra.stack import read_record
    from yeto.infra.stack.standby import LAPSE_S, keep_standbys
    from yeto.services.syncer import presence

    _, url = cluster
    paths = node_zero(tmp_path, url)
    bus = await NatsBus.connect(url, name="test-standby-lost")
    stop, name, pid = asyncio.Event(), "syncer-standby-yeto-0", None
    try:
        holder = await Lease.of(bus, "syncer", "syncer", "yeto-1")
        assert await holder.acquire() is False
        renewing = asyncio.create_task(holder.keep(stop))             # the holder lives throughout
        standby = await Lease.of(bus, "syncer", "syncer-standby", "yeto-2")
        standing = [asyncio.create_task(presence.present(standby)), asyncio.create_task(standby.acquire())]
        keeping = asyncio.create_task(keep_standbys(bus, paths.root, stop))
        first = await until_answered(lambda: presence_of(bus), 30, "the standby's presence")
        writes = int(2 * LAPSE_S / presence.PRESENT_S)                # two lapses of its own writes
        await until_answered(lambda: presence_of(bus, after=first[0] + writes), 60, f"{writes} presence writes")
        assert name not in read_record(paths)["pids"], "a standby started while the shard's stood by"
        for task in standing:                                         # node 2 lost: its standby with it
            task.cancel()
        rec = await until(lambda: (r := read_record(paths)) and name in r["pids"] and r, 60, f"{name} started on node 0")
        pid = rec["pids"][name]
        # a standby indeed: it writes its presence from node 0, and the holder keeps the lease
        seq, body = await until_answered(lambda: presence_of(bus, node="yeto-0"), 90, f"{name}'s presence")
        assert body == {"standby": name, "node": "yeto-0"} and holder.held.is_set() and not renewing.done()
        last = await bus.js.get_last_msg("YETO_LEASE", "yeto.snap.lease.syncer")
        assert json.loads(last.data)["holder"] == "syncer"
        stop.set()
        await asyncio.gather(renewing, keeping)
    finally:
        stop.set()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)          # the process this test's supervisor started, by its pid
        await bus.close()


def node_zero(tmp_path, url):
    """Node 0's stack record (no syncer of the shard runs there) in `tmp_path`, its paths."""
    from yeto.infra.bus import auth as bus_auth
    from yeto.infra.stack import StackPaths, _write_record

    paths = StackPaths(tmp_path / "node-0")
    paths.root.mkdir()
    bus_auth.prepare(paths.root)                             # the service's identity its components connect with
    _write_record(paths, {"url": url, "node": 0, "peers": ["10.9.0.2", "10.9.0.3", "10.9.0.4"], "syncers": 1,
                          "cluster": 3, "run_id": RUN, "pids": {}, "started_at": {}})
    return paths


async def presence_of(bus, after: int = 0, node: str | None = None) -> tuple[int, dict] | None:
    """The shard's standby presence (sequence, body) once written after sequence `after` (from `node`, if given)."""
    import json

    try:
        msg = await bus.js.get_last_msg("YETO_LEASE", "yeto.snap.lease.syncer.standby")
    except (NatsTimeout, NotFoundError):
        return None
    body = json.loads(msg.data)
    return (msg.seq, body) if msg.seq > after and node in (None, body["node"]) else None


async def lease_holder(bus) -> dict | None:
    import json

    try:
        msg = await bus.js.get_last_msg("YETO_LEASE", "yeto.snap.lease.syncer")
    except NatsTimeout:
        return None
    body = json.loads(msg.data)
    return body if body["holder"].endswith("yeto-0") else None


@pytest.mark.timeout(240)
async def test_ensure_streams_asks_again_through_a_cluster_without_a_quorum_and_succeeds_once_it_has_one(cluster):
    """Every service calls ensure_streams at its start: one started while the cluster elects (a node just lost) must
    not die of the first timeout or 503, as a finalizer did in a syncer-VM rehearsal of 2026-12-05 (docs/CLUSTER.md)."""
    from yeto.infra.nats.server import ensure_streams

    servers, _ = cluster
    survivor, *lost = servers.values()
    for s in lost:          # two of three: no quorum, no meta leader, until they are back
        s.kill()
    bus = await NatsBus.connect(survivor.url, name="ensure-streams")
    try:
        with pytest.raises((NatsTimeout, ServiceUnavailableError)):
            await ensure_streams(bus, retry_for_s=0)        # one try, as every service made before: it would have died
        asking = asyncio.create_task(ensure_streams(bus, retry_for_s=200))
        for s in lost:
            await asyncio.to_thread(s.start)
        await asking        # raises if the quorum's return did not let it through within its bound
        streams = {name: (await bus.js.stream_info(name)).config.num_replicas
                   for name in (EVT_STREAM, FRAG_STREAM, GKEY_STREAM, GDELTA_STREAM)}
        assert streams == dict.fromkeys(streams, 3), streams    # updated in place, never shrunk to one copy
    finally:
        await bus.close()
