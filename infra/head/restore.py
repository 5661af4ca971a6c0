"""A replacement head resumes a run from its mirror (mirror.py): files before its nats-server starts, then streams.

`yeto recover RUN` writes `restore.json` ({"mirror": root}) into the head's bundle; `yeto stack up --head` finds it in
its state dir and, before any service starts:
1. `restore_files`: the syncer's snapshots into `<state>/syncer/<run>/`, with `mirror-floor.json` (each fragment's
   mirrored version + LEAP: the dead head may have published versions after the mirror, which learners hold; the
   syncer's restore takes a version past the floor, so no version number ever names two values), and the islands'
   credentials into `auth/learners/<run>/` (the users file nats-server starts with admits them);
2. `restore_streams`: every mirrored event republished in order with its own `Nats-Msg-Id` (the services fold the
   run again, the tape writer writes a new tape from it), and the global streams' sequences moved past anything
   the dead head's learners saw (their ordered watches resume after the last sequence they got, and would skip
   what a fresh stream numbers from 1).
"""
from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from yeto.infra.bus import auth as bus_auth
from yeto.infra.head.mirror import read_manifest, store
from yeto.infra.run_paths import run_path
from yeto.schemas.subjects import EVT_STREAM, GDELTA_STREAM, GKEY_STREAM

REQUEST, DONE = "restore.json", "restored.json"
FLOOR_FILE = "mirror-floor.json"
LEAP = 1000               # versions a dead head may have published after its last mirror (10 s): far more than any run does
SEQ_MARGIN = 1_000_000    # global-stream messages it may have published after the last mirror


def requested(state_dir: Path) -> str | None:
    """The mirror a head is to resume from (`yeto recover` asked for it), None for a fresh head."""
    try:
        return json.loads((Path(state_dir) / REQUEST).read_text())["mirror"]
    except FileNotFoundError:
        return None


def done(state_dir: Path, manifest: dict, num_events: int) -> None:
    """Recorded once the streams hold the mirror: a later `stack up` on this head (a restart) restores nothing."""
    Path(state_dir, REQUEST).replace(Path(state_dir, DONE))
    bus_auth.write_secret(Path(state_dir, DONE), json.dumps({"events": num_events, "restored_at": time.time(),
                                                             "mirrored_at": manifest.get("mirrored_at")}))


def restore_files(state_dir: Path, run_id: str, root: str) -> dict:
    """Snapshots, their version floor and the islands' credentials from the mirror; the mirror's manifest."""
    manifest = read_manifest(root)
    if manifest is None:
        raise ValueError(f"no head mirror at {root} (its mirror.json is missing): the head never mirrored this run; "
                         f"mirror mode needs the run's --output store")
    if manifest["run_id"] != run_id:
        raise ValueError(f"the mirror at {root} is run {manifest['run_id']}'s, not {run_id}'s")
    fs, path = store(root)
    snaps = run_path(state_dir, run_id, area="syncer")
    snaps.mkdir(parents=True, exist_ok=True)
    floor = {}
    for name, version in manifest["snapshots"].items():
        (snaps / name).write_bytes(fs.cat_file(f"{path}/syncer/{name}"))
        floor[int(name.split("-")[1].split(".")[0])] = version + LEAP
    (snaps / FLOOR_FILE).write_text(json.dumps(floor))
    creds = bus_auth.auth_dir(state_dir) / "learners" / run_id
    for remote in fs.glob(f"{path}/auth/*.json"):
        bus_auth.write_secret(creds / Path(remote).name, fs.cat_file(remote).decode())
    return manifest


async def restore_streams(url: str, root: str, manifest: dict) -> int:
    """Republish the mirrored events (their sequence numbers kept), move the global streams on; how many events."""
    from yeto.infra.bus.nats_bus import NatsBus

    fs, path = store(root)
    bus = await NatsBus.connect(url, name="head-restore")
    try:
        count = 0
        for segment in manifest["segments"]:
            for line in fs.cat_file(f"{path}/{segment}").decode().splitlines():
                msg = json.loads(line)
                if count == 0 and msg["seq"] > 1:     # the stream had dropped its oldest: number as it did
                    await _first_seq(bus, EVT_STREAM, msg["seq"])
                seq = await bus.publish_raw(msg["subject"], base64.b64decode(msg["data"]), headers=msg["headers"])
                assert seq == msg["seq"], f"event {msg['seq']} of the mirror republished as {seq}: the mirror has a hole"
                count += 1
        for stream in (GKEY_STREAM, GDELTA_STREAM):
            await _first_seq(bus, stream, manifest.get(f"{stream}_last_seq", 0) + SEQ_MARGIN)
        return count
    finally:
        await bus.close()


async def _first_seq(bus, stream: str, seq: int) -> None:
    """An empty stream's next message gets sequence `seq` (a purge up to `seq` moves its first sequence there)."""
    reply = json.loads((await bus.nc.request(f"$JS.API.STREAM.PURGE.{stream}", json.dumps({"seq": seq}).encode(),
                                             timeout=10)).data)
    if not reply.get("success"):
        raise RuntimeError(f"moving {stream} to sequence {seq} failed: {reply.get('error')}")
