"""The nats-server manager and the stream topology, against a real nats-server."""
from __future__ import annotations

import pytest

from yeto.infra.bus import connect
from yeto.infra.nats.server import NatsServer, ensure_streams, render_config
from yeto.schemas.subjects import MAX_PAYLOAD, STREAMS


def test_non_loopback_bind_without_tls_and_auth_is_refused(tmp_path):
    with pytest.raises(ValueError, match="needs TLS and authentication"):
        render_config(host="0.0.0.0", port=4222, store_dir=tmp_path, max_payload=1024, tls=None,
                      users_file=tmp_path / "users.conf")


def test_a_started_server_entered_as_a_context_is_the_one_process_and_stops_with_it(tmp_path):
    """`with NatsServer(d).start() as s:` started a second process on the same port, and the first outlived it."""
    server = NatsServer(tmp_path / "nats").start()
    first = server.proc
    try:
        with server as entered:
            assert entered is server and server.proc is first and first.poll() is None
        assert first.poll() is not None, "the server outlived its `with`"
    finally:
        if first.poll() is None:        # a failed run must not leave it behind
            first.kill()
            first.wait()
    assert (tmp_path / "nats" / "nats-server.log").read_text().count("Starting nats-server") == 1


def test_generated_config_is_loopback_with_jetstream_on_disk(tmp_path):
    text = render_config(host="127.0.0.1", port=4222, store_dir=tmp_path / "js", max_payload=MAX_PAYLOAD, tls=None,
                         users_file=None)
    assert 'listen: "127.0.0.1:4222"' in text and f"max_payload: {MAX_PAYLOAD}" in text and str(tmp_path / "js") in text


async def test_streams_are_created_idempotently_with_their_retention(nats_server):
    bus = await connect(nats_server.url)
    await ensure_streams(bus.js)
    await ensure_streams(bus.js)  # a second time changes nothing and does not fail
    for spec in STREAMS:
        info = await bus.js.stream_info(spec.name)
        assert info.config.subjects == list(spec.subjects)
        assert str(getattr(info.config.retention, "value", info.config.retention)) == spec.retention
    await bus.close()


async def test_publish_deduplicates_by_message_id(bus, run_id):
    from yeto.schemas.events import ServiceStarted

    msg = ServiceStarted(run_id=run_id, service="s", instance="i", pid=1, host="h")
    first = await bus.publish(msg)
    again = await bus.publish(msg)
    assert first == again
    info = await bus.js.stream_info("YETO_EVT", subjects_filter=f"yeto.evt.{run_id}.>")
    assert info.state.subjects == {f"yeto.evt.{run_id}.ServiceStarted": 1}


async def test_restarted_server_keeps_acknowledged_events(fresh_nats, run_id):
    from yeto.schemas.events import ServiceStarted

    bus = await connect(fresh_nats.url)
    seqs = [await bus.publish(ServiceStarted(run_id=run_id, service="s", instance=f"i{k}", pid=k, host="h")) for k in range(50)]
    fresh_nats.kill()
    fresh_nats.start()
    # the client reconnects by itself; the publish after the restart retries until it lands
    seqs.append(await bus.publish(ServiceStarted(run_id=run_id, service="s", instance="after", pid=0, host="h")))
    info = await bus.js.stream_info("YETO_EVT")
    assert info.state.messages == 51 and seqs == list(range(1, 52))
    await bus.close()


async def test_nats_server_killed_under_load_loses_no_acknowledged_event(fresh_nats, run_id):
    import asyncio

    from yeto.schemas.events import ServiceStarted

    bus = await connect(fresh_nats.url)
    acked: dict[str, int] = {}
    a_third_acked = asyncio.Event()

    async def publisher(worker: int) -> None:
        for k in range(150):
            msg = ServiceStarted(id=f"{run_id}-{worker}-{k}", run_id=run_id, service="s", instance=f"{worker}", pid=k, host="h")
            acked[msg.id] = await bus.publish(msg)
            if len(acked) >= 200:
                a_third_acked.set()

    tasks = [asyncio.create_task(publisher(w)) for w in range(4)]
    await asyncio.wait_for(a_third_acked.wait(), 60)
    fresh_nats.kill()                     # kill -9 mid-stream, with publishes in flight
    # The outage itself, not a wait for anything: the publishes in flight meet a server that is away a while.
    await asyncio.sleep(0.5)
    fresh_nats.start()
    await asyncio.gather(*tasks)
    info = await bus.js.stream_info("YETO_EVT")
    assert len(acked) == 600 and info.state.messages == 600          # every acknowledged event, none twice
    assert sorted(acked.values()) == list(range(1, 601))
    await bus.close()
