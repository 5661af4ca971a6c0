"""The tape writer on a three-node NATS cluster that loses a node mid-stream: the node leading the tape's consumer
killed or shut down (a shut-down leader ends the pulls it holds with "409 Server Shutdown"), or the node the writer is
connected to shut down. Each time the same consumer serves on (it is not recreated) and the tape lands every event,
once, in order."""
from __future__ import annotations

import asyncio

import psutil
import pytest

from test_tape_writer import count_when, start_writer, tick
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.nats import cluster as natscluster
from yeto.infra.tape.sql import ask
from yeto.schemas.subjects import EVT_STREAM, event_subject


async def consumer_state(bus: NatsBus) -> tuple[str, str] | None:
    """(created, leader) of the tape's consumer; None while it has no leader to answer."""
    try:
        info = await bus.js.consumer_info(EVT_STREAM, "tape", timeout=2)
    except Exception:  # noqa: BLE001 - being elected: not yet
        return None
    return (str(info.created), info.cluster.leader) if info.cluster and info.cluster.leader else None


async def led(bus: NatsBus, what: str) -> tuple[str, str]:
    """consumer_state once the consumer has a leader to answer, asked until it does for 30 s (there is no event for
    an election's end: the pause only paces the questions, as count_when's does)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not (state := await consumer_state(bus)):
        assert loop.time() < deadline, what
        await asyncio.sleep(0.1)
    return state


async def publish(bus: NatsBus, ids: range) -> None:
    await asyncio.gather(*(bus.publish_raw(event_subject("r-fail", "Tick"), tick(i), msg_id=f"f{i}", retry_for=30)
                           for i in ids))


def writers_node(writer, servers) -> str:
    """The name of the node the writer's bus connection is on (its TCP peer's port)."""
    ports = {s.port: name for name, s in servers.items()}
    peers = {c.raddr.port for c in psutil.Process(writer.pid).net_connections("tcp") if c.raddr}
    (name,) = [ports[p] for p in peers if p in ports]
    return name


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("loss", ["leader killed", "leader shut down", "writer's node shut down"])
def test_the_tape_consumer_survives_a_lost_node_and_the_tape_lands_every_event_once(tmp_path, monkeypatch, loss):
    (tmp_path / "logs").mkdir()
    users = bus_auth.prepare(tmp_path)
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(tmp_path)))   # this process and the writer's
    servers = natscluster.cluster_servers(tmp_path / "nats", 3, users_file=users, logs=tmp_path / "logs")
    url = natscluster.cluster_url(servers)
    log_path = tmp_path / "tape.log"
    writer = None

    async def scenario() -> None:
        nonlocal writer
        await natscluster.ready(url, 3)
        writer = start_writer(url, tmp_path / "tape.duckdb", open(log_path, "ab"))
        bus = await NatsBus.connect(url, name="test-failover")
        try:
            await publish(bus, range(200))
            await count_when(bus, lambda n: n >= 200)
            before = await led(bus, "the tape's consumer never had a leader")
            # a node named yeto-K is nats-server-K; a graceful stop (SIGTERM) ends the pulls it holds with a
            # "409 Server Shutdown", which is no sign that the consumer is gone
            lost = writers_node(writer, servers) if loss == "writer's node shut down" else \
                f"nats-server-{before[1].rsplit('-', 1)[1]}"
            if loss == "leader killed":
                servers[lost].kill()
            else:
                servers[lost].stop()
            await publish(bus, range(200, 400))                   # through the survivors, while they elect
            await count_when(bus, lambda n: n >= 400, timeout=120)
            after = await led(bus, "the tape's consumer has no leader 30 s after the node's loss")
            assert after[1] != f"yeto-{lost.rsplit('-', 1)[1]}", (lost, before, after)
            # Not recreated: the new leader serves the consumer that was there (a recreated one is a new R3 group,
            # electing again when the next pull comes, which recreated it again).
            assert after[0] == before[0], f"the consumer was recreated: {before} -> {after}"
            (row,) = (await ask(bus, "SELECT count(*), count(DISTINCT payload->>'id'), min(seq), max(seq) FROM events"))["rows"]
            assert row == [400, 400, 1, 400], row
        finally:
            await bus.close()

    try:
        for server in servers.values():
            server.start()
        asyncio.run(scenario())
        assert "recreating" not in log_path.read_text(), log_path.read_text()[-3000:]
    finally:
        if writer is not None:
            writer.terminate()
            writer.wait(30)
        for server in servers.values():
            server.stop()

