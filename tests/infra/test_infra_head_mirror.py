"""Mirror mode's two halves against real nats-servers: a head mirrors its run (events, the syncer's snapshots, the
islands' credentials) to a store folder; a replacement head's fresh server gets the events back under their own
sequence numbers and message ids, the global streams numbered past the dead head's, and the files in place."""
from __future__ import annotations

import json

import numpy as np
import pytest

from waiting import until
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.head import mirror, restore
from yeto.infra.nats.server import NatsServer, ensure_streams
from yeto.services.syncer.dataplane import mirror_floor
from yeto.services.syncer.snapshot import FragmentSnapshot, write

RUN = "r-mirror"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def two_heads(tmp_path):
    """(the first head's bus, the replacement's URL and bus), each its own nats-server and store."""
    servers = [NatsServer(tmp_path / f"nats-{k}").start() for k in range(2)]
    buses = [await NatsBus.connect(s.url, name="test") for s in servers]
    for b in buses:
        await ensure_streams(b)
    yield buses[0], servers[1].url, buses[1]
    for b in buses:
        await b.close()
    for s in servers:
        s.stop()


async def stored(bus: NatsBus, stream: str) -> list[tuple[int, str, bytes, str]]:
    info = (await bus.js.stream_info(stream)).state
    out = []
    for seq in range(info.first_seq, info.last_seq + 1):
        msg = await bus.js.get_msg(stream, seq)
        out.append((msg.seq, msg.subject, msg.data, (msg.headers or {}).get("Nats-Msg-Id")))
    return out


def snapshot(state, fragment: int, version: int) -> None:
    values = np.arange(6, dtype=np.float32) + version
    write(state / "syncer" / RUN, FragmentSnapshot(fragment, version, "fp", values, values * 0, values))


async def test_a_replacement_head_gets_the_mirrored_events_snapshots_and_credentials_back(two_heads, tmp_path):
    old, new_url, new = two_heads
    state, root = tmp_path / "head", str(tmp_path / "store" / ".yeto-head" / RUN)
    bus_auth.prepare(state, ((RUN, "island-0"), (RUN, "island-1")))
    for k in range(5):
        await old.publish_raw(f"yeto.evt.{RUN}.Thing", json.dumps({"k": k}).encode(), msg_id=f"id-{k}")
    for k in range(3):
        await old.publish_raw(f"yeto.glob.{RUN}.0.key.0", b"keyframe %d" % k)
    snapshot(state, 0, 4)
    head = mirror.Mirror(old, state, RUN, root)
    assert (await head.once())["events_through"] == 5
    await old.publish_raw(f"yeto.evt.{RUN}.Thing", b"{}", msg_id="id-5")
    snapshot(state, 0, 5)
    snapshot(state, 1, 5)
    manifest = await head.once()
    assert manifest["events_through"] == 6 and len(manifest["segments"]) == 2
    assert manifest["snapshots"] == {"frag-0000.safetensors": 5, "frag-0001.safetensors": 5}
    await old.publish_raw(f"yeto.evt.{RUN}.Thing", b"{}", msg_id="id-6")     # after the last mirror: the lost window

    fresh = tmp_path / "replacement"
    got = restore.restore_files(fresh, RUN, root)
    for name in manifest["snapshots"]:
        assert (fresh / "syncer" / RUN / name).read_bytes() == (state / "syncer" / RUN / name).read_bytes()
    assert mirror_floor(fresh / "syncer" / RUN) == {0: 5 + restore.LEAP, 1: 5 + restore.LEAP}
    for island in ("island-0", "island-1"):
        path = bus_auth.learner_file(fresh, RUN, island)
        assert path.read_text() == bus_auth.learner_file(state, RUN, island).read_text()
        assert path.stat().st_mode & 0o777 == 0o600
    assert await restore.restore_streams(new_url, root, got) == 6
    assert await stored(new, "YETO_EVT") == (await stored(old, "YETO_EVT"))[:6]
    # the ids kept: a duplicate is acknowledged with its original's sequence
    assert await new.publish_raw(f"yeto.evt.{RUN}.Thing", b"{}", msg_id="id-3") == 4
    assert await new.publish_raw(f"yeto.glob.{RUN}.0.key.0", b"next") == 3 + restore.SEQ_MARGIN


async def test_a_replacement_head_refuses_a_missing_mirror_or_another_runs(two_heads, tmp_path):
    old, _, _ = two_heads
    root = str(tmp_path / "store" / ".yeto-head" / RUN)
    with pytest.raises(ValueError, match="no head mirror"):
        restore.restore_files(tmp_path / "a", RUN, root)
    await mirror.Mirror(old, tmp_path / "head", RUN, root).once()
    with pytest.raises(ValueError, match="not r-other's"):
        restore.restore_files(tmp_path / "b", "r-other", root)


def test_the_mirror_lives_beside_the_output_never_inside_the_artifacts_folder():
    assert mirror.mirror_root("s3://bucket/runs/qwen/", "r1") == "s3://bucket/runs/.yeto-head/r1"
    assert mirror.mirror_root("r2://bucket/out", "r1") == "s3://bucket/.yeto-head/r1"
    assert mirror.mirror_root("/data/out", "r1") == "/data/.yeto-head/r1"
    assert mirror.mirror_root("gs://bucket", "r1") == "gs://bucket/.yeto-head/r1"     # a bucket's root: inside it


def test_a_snapshots_version_is_read_from_its_header(tmp_path):
    snapshot(tmp_path, 3, 17)
    assert mirror.snapshot_version((tmp_path / "syncer" / RUN / "frag-0003.safetensors").read_bytes()) == 17


async def test_a_snapshot_is_mirrored_at_once_not_at_the_next_period(two_heads, tmp_path):
    import asyncio

    old, _, _ = two_heads
    root, stop, poke = str(tmp_path / "store" / RUN), asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(mirror.keep_mirrored(old, tmp_path / "head", RUN, root, stop, every_s=3600, poke=poke))
    await until(lambda: (mirror.read_manifest(root) or {}).get("mirrored_at"), 30, "the first turn, at the start")
    snapshot(tmp_path / "head", 0, 9)
    poke.set()                                      # what the head's supervisor does on SnapshotWritten
    await until(lambda: "frag-0000.safetensors" in mirror.read_manifest(root)["snapshots"], 30,
                "the snapshot mirrored an hour before the next period")
    stop.set()
    await task
    assert mirror.read_manifest(root)["snapshots"] == {"frag-0000.safetensors": 9}
