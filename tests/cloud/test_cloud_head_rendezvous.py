"""The head's rendezvous in the run's store: the record read as hostile input, written once by the first head and
replaced by `yeto recover`, and a learner's connection following it from a dead server to a live one at another
address, over TLS with the head's pinned certificate (issued for none of the addresses it is reached at). `yeto
recover` takes --output from the run's head record, and refuses with a sentence when that holds none. A cloud island's task
carries --head-rendezvous (none without a mirror) and installs its store's fsspec package."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from waiting import until
from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.head import mirror, rendezvous
from yeto.infra.head import records as heads
from yeto.infra.nats.server import NatsServer, TlsConfig
from yeto.infra.nats.tls import self_signed
from yeto.learners.transport import rendezvous as follower
from yeto.schemas.head_rendezvous import MAX_BYTES, head_url, record

RUN = "r-moves"
YETO = str(Path(sys.executable).parent / "yeto")
pytestmark = pytest.mark.timeout(60)


def test_a_rendezvous_record_names_the_head_url_it_was_written_with():
    assert head_url(record(RUN, "tls://203.0.113.7:4222", 1.0), RUN, "tls") == "tls://203.0.113.7:4222"
    assert head_url(record(RUN, "tls://head.example.com:4222", 1.0), RUN) == "tls://head.example.com:4222"
    assert head_url(record(RUN, "tls://[2001:db8::1]:4222", 1.0), RUN) == "tls://[2001:db8::1]:4222"


@pytest.mark.parametrize(("raw", "why"), [
    (b"x" * (MAX_BYTES + 1), "larger than"),
    (b"\xff\xfe not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({"run_id": "r-other", "url": "tls://10.0.0.1:4222"}).encode(), "names run 'r-other'"),
    (json.dumps({"run_id": RUN, "url": "nats://10.0.0.1:4222"}).encode(), "speaks nats://, not tls://"),
    (json.dumps({"run_id": RUN, "url": "tls://user:pw@10.0.0.1:4222"}).encode(), "not of the form"),
    (json.dumps({"run_id": RUN, "url": "tls://10.0.0.1:4222/path"}).encode(), "not of the form"),
    (json.dumps({"run_id": RUN, "url": "http://10.0.0.1:4222"}).encode(), "not of the form"),
    (json.dumps({"run_id": RUN, "url": "tls://10.0.0.1"}).encode(), "not of the form"),
    (json.dumps({"run_id": RUN, "url": "tls://10.0.0.1:99999"}).encode(), "not a TCP port"),
    (json.dumps({"run_id": RUN, "url": "tls://-bad-.example:4222"}).encode(), "not a host name"),
    (json.dumps({"run_id": RUN, "url": "tls://[zz::1]:4222"}).encode(), "not of the form"),
    (json.dumps({"run_id": RUN, "url": ["tls://10.0.0.1:4222"]}).encode(), "not of the form"),
])
def test_a_hostile_rendezvous_record_is_refused_saying_why(raw, why):
    with pytest.raises(ValueError, match=why):
        head_url(raw, RUN, "tls")


def test_the_first_head_writes_the_rendezvous_once_and_recover_replaces_it(tmp_path):
    output = str(tmp_path / "store" / "artifact")
    root, where = mirror.mirror_root(output, RUN), rendezvous.place(output, RUN)
    assert where == f"{tmp_path / 'store' / '.yeto-head' / RUN}/head.json"
    rendezvous.first_head(root, RUN, "tls://10.0.0.2:4222")()           # the first head's mirror, after its first turn
    rendezvous.first_head(root, RUN, "tls://10.0.0.9:4222")()           # a replacement's (its restored RunLaunched)
    assert follower.read(where, RUN, "tls") == "tls://10.0.0.2:4222"
    assert rendezvous.publish(root, RUN, "tls://10.0.0.3:4222", now=3.0)                     # `yeto recover`
    assert follower.read(where, RUN, "tls") == "tls://10.0.0.3:4222"
    with pytest.raises(ValueError, match="does not exist"):
        follower.read(str(tmp_path / "nowhere" / "head.json"), RUN, "tls")


@pytest.fixture
def tls_servers(tmp_path, monkeypatch):
    """Two TLS nats-servers on this machine under one certificate issued only for the name `yeto-head` (pinned by
    the client, as islands pin their head's), so an address the certificate does not name must verify."""
    cert, key = self_signed(tmp_path / "tls", ["yeto-head"])
    monkeypatch.setenv("YETO_NATS_CA", str(cert))
    servers = [NatsServer(tmp_path / f"head-{k}", tls=TlsConfig(cert_file=cert, key_file=key)).start() for k in range(2)]
    yield servers
    for s in servers:
        s.stop()


async def test_a_learner_whose_head_went_away_follows_the_rendezvous_to_its_new_address(tmp_path, tls_servers,
                                                                                       monkeypatch, capfd):
    old, new = tls_servers
    output = str(tmp_path / "store" / "artifact")
    root, where = mirror.mirror_root(output, RUN), rendezvous.place(output, RUN)
    reads: list[str] = []

    def counted(*args):
        reads.append(args[0])
        return read(*args)
    read = follower.read
    monkeypatch.setattr(follower, "read", counted)
    bus = await NatsBus.connect(old.url, name="learner-test")
    following = asyncio.ensure_future(follower.follow(bus.nc, where, RUN, old.url, follow_s=0.3, read_every_s=0.1,
                                                      check_s=0.05))
    try:
        Path(root).mkdir(parents=True)
        Path(where).write_bytes(b"{garbage")          # a garbage file: keep retrying the known address, said once
        old.stop()
        await until(lambda: len(reads) >= 3, 20, "three reads of the rendezvous while the bus is away")
        assert bus.nc.connected_url is None
        rendezvous.publish(root, RUN, new.url, now=1.0)
        await until(lambda: bus.nc.is_connected and bus.nc.connected_url.port == new.port, 20,
                    "the connection to follow the rendezvous to the new server")
        got = await bus.nc.request("$JS.API.INFO", b"", timeout=5)          # the new server answers on it
        assert b"api" in got.data
    finally:
        following.cancel()
        await bus.close()
    err = capfd.readouterr().err
    assert err.count("unusable (it is not JSON): retrying") == 1, err
    assert f"names {new.url}: reconnecting there (was {old.url})" in err, err


def test_a_learner_connects_first_to_the_address_the_rendezvous_names(tmp_path, capfd):
    where = rendezvous.place(str(tmp_path / "store" / "artifact"), RUN)
    assert follower.start_url(where, RUN, "tls://10.0.0.2:4222") == "tls://10.0.0.2:4222"     # none yet
    rendezvous.publish(str(Path(where).parent), RUN, "tls://10.0.0.3:4222", now=1.0)
    assert follower.start_url(where, RUN, "tls://10.0.0.2:4222") == "tls://10.0.0.3:4222"
    assert follower.start_url(where, RUN, "nats://10.0.0.2:4222") == "nats://10.0.0.2:4222"   # no scheme change
    err = capfd.readouterr().err
    assert "does not exist (yet)): connecting to tls://10.0.0.2:4222" in err and "speaks tls://, not nats://" in err


def recover(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "YETO_HOME": str(home), "YETO_SKY_API": "nothing.here:Nothing"}   # no SkyPilot call may happen
    return subprocess.run([YETO, "recover", *args], env=env, capture_output=True, text=True, timeout=60)


def test_recover_takes_the_output_from_the_head_record_and_refuses_when_it_holds_none(tmp_path):
    rec = {**heads.new_record(tmp_path, RUN, price_per_hour=0.19, launched_at=0.0), "state": "up",
           "url": "tls://192.0.2.1:4222"}
    heads.write_head(tmp_path, rec)
    out = recover(tmp_path, RUN)
    assert out.returncode == 2 and f"the --output of run {RUN} is not known here" in out.stderr, out.stderr
    heads.write_head(tmp_path, {**rec, "output": str(tmp_path / "store" / "out")})
    out = recover(tmp_path, RUN)        # the record's output is where it looks for the mirror
    assert out.returncode == 2 and f"no head mirror of run {RUN} at {tmp_path / 'store' / '.yeto-head' / RUN}" \
        in out.stderr, out.stderr


async def test_a_learners_log_handler_connects_to_the_head_the_rendezvous_names(tmp_path, tls_servers):
    from yeto.infra.nats.server import ensure_streams
    from yeto.learners.transport.logs import BusLogHandler

    old, new = tls_servers
    where = rendezvous.place(str(tmp_path / "store" / "artifact"), RUN)
    rendezvous.publish(str(Path(where).parent), RUN, new.url, now=1.0)
    admin = await NatsBus.connect(new.url, name="test")
    await ensure_streams(admin)
    old.stop()                          # the address the handler is given is dead: only the rendezvous leads on
    handler = BusLogHandler(old.url, run_id=RUN, learner="island-0", generation=0, head_rendezvous=where)
    try:
        handler.emit(logging.LogRecord("yeto.test", logging.INFO, __file__, 1, "after the move", None, None))
        await until(lambda: handler.num_sent == 1, 30, "the log line published", detail=lambda: handler.url)
        assert handler.url == new.url
        stored = await admin.js.stream_info("YETO_LOG")
        assert stored.state.messages == 1       # on the server the rendezvous named
    finally:
        handler.close()
        await admin.close()


@pytest.mark.parametrize(("output", "package", "where"), [
    ("s3://bucket/runs/chat", "s3fs", f"s3://bucket/runs/.yeto-head/{RUN}/head.json"),
    ("gcs://bucket/chat", "gcsfs", f"gs://bucket/.yeto-head/{RUN}/head.json"),
    ("hf://org/chat", None, None),      # no mirror, so no rendezvous: the flag is not given
    ("", None, None),
])
def test_a_cloud_island_is_told_the_rendezvous_and_installs_its_store_package(tmp_path, output, package, where):
    pytest.importorskip("sky")
    from yeto.services.launcher.backends.base import IslandLaunch
    from yeto.services.launcher.backends.sky_tasks import island_task

    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": []}\n')
    task = island_task(IslandLaunch(run_id=RUN, island=0, generation=0, num_islands=2, nats_url="tls://head:4222",
                                    spec={"cloud": "aws", "gpu": "A100", "count": 1, "spot": True},
                                    recipe={"train": {"model": "qwen35-9b", "data": str(data), "max_steps": 10},
                                            "output": output}))
    assert ("--head-rendezvous" in task.run) == (where is not None), task.run
    assert where is None or f"--head-rendezvous {where}" in task.run, task.run
    assert (f"pip install -q {package}" in task.setup) if package else ("s3fs" not in task.setup)
