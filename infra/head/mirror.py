"""Mirror mode: what a replacement head needs, copied off the head VM to the run's store every few seconds.

The mirror lives beside the run's `--output` (`<parent of output>/.yeto-head/<run>/`, so `yeto verify` of the
artifact finds no stranger in its folder) in any store fsspec reaches, a local folder included. It holds:
- `events/<first>-<last>.jsonl`: every `YETO_EVT` message (stream seq, subject, headers with its `Nats-Msg-Id`,
  payload), appended segment by segment: the event log a successor republishes, the tape rebuilt from it;
- `syncer/frag-NNNN.safetensors`: the syncer's newest snapshot of each fragment (theta is the fragment's newest
  global, so the keyframes are made again from them; momentum and the learners' ledgers come with it);
- `auth/<learner>.json`: the islands' bus credentials, so the running islands are admitted by the successor
  (secrets: the store must be as private as the artifact, docs/CLOUD.md);
- `mirror.json`, written last: how far it goes (events through seq N, each snapshot's version, the global
  streams' last sequence numbers, when). A successor reads only what mirror.json names.
What was acknowledged after the last mirror.json is the window a head's loss may lose (restore.py).
"""
from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from yeto.infra.bus.auth import auth_dir
from yeto.schemas.subjects import EVERY_EVENT, GDELTA_STREAM, GKEY_STREAM

EVERY_S = 10.0              # the mirror's period: at most this much acknowledged history is lost with the head
SOONEST_S = 2.0             # a new snapshot is mirrored at once, but never sooner than this after the last turn
MANIFEST = "mirror.json"
STORE_PROTOCOLS = {"r2": "s3", "cos": "s3", "gcs": "gs"}     # SkyPilot store schemes fsspec knows by another name
BATCH = 500


def mirror_root(output: str, run_id: str) -> str:
    """Where a run's mirror lives: beside its output (a sibling folder), never inside the artifact's folder."""
    out = output.rstrip("/")
    scheme, _, path = out.rpartition("://")
    parent = out.rsplit("/", 1)[0] if "/" in path else out     # a bucket's root: the mirror goes inside it
    if scheme in STORE_PROTOCOLS:
        parent = f"{STORE_PROTOCOLS[scheme]}://{parent.split('://', 1)[1]}"
    return f"{parent}/.yeto-head/{run_id}"


def store(root: str):
    """(fsspec filesystem, path) of a mirror root."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(root if "://" in root else str(Path(root).expanduser().resolve()))
    return fs, path.rstrip("/")


def read_manifest(root: str) -> dict | None:
    fs, path = store(root)
    try:
        return json.loads(fs.cat_file(f"{path}/{MANIFEST}"))
    except FileNotFoundError:
        return None


def snapshot_version(data: bytes) -> int:
    """The version a syncer snapshot's header names (safetensors: 8 bytes of header length, then the JSON)."""
    size = int.from_bytes(data[:8], "little")
    return int(json.loads(json.loads(data[8:8 + size])["__metadata__"]["yeto"])["version"])


class Mirror:
    """One head's mirror of one run: `once()` copies what is new since the last call, then rewrites mirror.json."""

    def __init__(self, bus, state_dir: Path, run_id: str, root: str):
        self.bus, self.state_dir, self.run_id, self.root = bus, Path(state_dir), run_id, root
        self.fs, self.path = store(root)
        self.fs.makedirs(self.path, exist_ok=True)      # a folder store needs it; a bucket has no folders to make
        old = read_manifest(root) or {}
        self.manifest = {"run_id": run_id, "events_through": 0, "segments": [], "snapshots": {}, **old}
        self.copied: dict[str, tuple[int, int]] = {}      # snapshot file -> (size, mtime_ns) as last copied

    async def once(self) -> dict:
        began = time.time()
        await self._events()
        self._snapshots()
        self._credentials()
        for stream in (GKEY_STREAM, GDELTA_STREAM):
            self.manifest[f"{stream}_last_seq"] = (await self.bus.js.stream_info(stream)).state.last_seq
        self.manifest["mirrored_at"] = began        # everything acknowledged before `began` is in the mirror
        self.fs.pipe_file(f"{self.path}/{MANIFEST}", json.dumps(self.manifest, indent=1).encode())
        return self.manifest

    async def _events(self) -> None:
        after = self.manifest["events_through"]
        consumer = await self.bus.consumer([EVERY_EVENT], ack=False, after_seq=after)
        lines: list[str] = []
        try:
            while batch := await consumer.fetch(BATCH, timeout_s=0.5):
                lines += [json.dumps({"seq": d.seq, "subject": d.subject, "headers": d.headers,
                                      "data": base64.b64encode(d.data).decode()}) for d in batch]
                if batch[-1].num_pending == 0:
                    break
        finally:
            await consumer.close()
        if lines:
            first, last = json.loads(lines[0])["seq"], json.loads(lines[-1])["seq"]
            name = f"events/{first:012d}-{last:012d}.jsonl"
            self.fs.makedirs(f"{self.path}/events", exist_ok=True)
            self.fs.pipe_file(f"{self.path}/{name}", ("\n".join(lines) + "\n").encode())
            self.manifest["segments"].append(name)
            self.manifest["events_through"] = last

    def _snapshots(self) -> None:
        folder = self.state_dir / "syncer" / self.run_id
        for file in sorted(folder.glob("frag-*.safetensors")):
            st = file.stat()
            if self.copied.get(file.name) == (st.st_size, st.st_mtime_ns):
                continue
            data = file.read_bytes()          # one read of an atomically replaced file: the old one or the new one
            self.fs.makedirs(f"{self.path}/syncer", exist_ok=True)
            self.fs.pipe_file(f"{self.path}/syncer/{file.name}", data)
            self.manifest["snapshots"][file.name] = snapshot_version(data)
            self.copied[file.name] = (st.st_size, st.st_mtime_ns)

    def _credentials(self) -> None:
        for file in sorted((auth_dir(self.state_dir) / "learners" / self.run_id).glob("*.json")):
            self.fs.makedirs(f"{self.path}/auth", exist_ok=True)
            self.fs.pipe_file(f"{self.path}/auth/{file.name}", file.read_bytes())


async def keep_mirrored(bus, state_dir: Path, run_id: str, root: str, stop, every_s: float = EVERY_S,
                        poke=None, then=None) -> None:
    """Mirror every `every_s` seconds, and at each `poke` (the syncer wrote a snapshot) at most every SOONEST_S, until
    `stop` is set, and once more then. A failed mirror is said on the head's log and tried again at the next turn:
    the run goes on (its window grows meanwhile). `then()`, when given, runs once after the first turn that
    succeeds, and again after the next while it raises (the first head writes its rendezvous so: rendezvous.py)."""
    import asyncio

    poke = poke or asyncio.Event()

    mirror, said = Mirror(bus, state_dir, run_id, root), None
    while True:
        try:
            done = await mirror.once()
            if then is not None:
                then()
                then = None
            if said is None:
                print(f"mirroring run {run_id} to {root} every {every_s:g}s", flush=True)
            said = done
        except Exception as e:  # noqa: BLE001 - a store that fails now may answer at the next turn
            print(f"mirror of run {run_id} to {root} failed ({type(e).__name__}: {e}); trying again in {every_s:g}s",
                  flush=True)
        if stop.is_set():
            return
        turn = asyncio.get_running_loop().time()
        poke.clear()
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(poke.wait())]
        await asyncio.wait(waits, timeout=every_s, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        if not stop.is_set():       # a snapshot right after a turn: wait out SOONEST_S (a store is no disk)
            await asyncio.sleep(max(0.0, turn + SOONEST_S - asyncio.get_running_loop().time()))
