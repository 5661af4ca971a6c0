"""A replacement head's start (`yeto stack up --head` with `restore.json` in its state dir, put there by `yeto
recover`): the mirror's files before nats-server starts, its events before any service does (infra/head/restore.py)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from yeto.infra.head import restore


def prepare(state_dir: Path, run_id: str) -> Callable[[str], None] | None:
    """None for a fresh head; else restore the files now and return what republishes the streams (stack.up calls it
    once they exist)."""
    root = restore.requested(state_dir)
    if root is None:
        return None
    began = time.monotonic()
    manifest = restore.restore_files(state_dir, run_id, root)
    print(f"restoring run {run_id} from the head mirror at {root} (mirrored at {time.ctime(manifest.get('mirrored_at'))}: "
          f"{manifest['events_through']} events, {len(manifest['snapshots'])} fragment snapshots)", flush=True)

    def republish(url: str) -> None:
        count = asyncio.run(restore.restore_streams(url, root, manifest))
        restore.done(state_dir, manifest, count)
        print(f"restored {count} events and {len(manifest['snapshots'])} snapshots in {time.monotonic() - began:.1f}s; "
              f"the services resume from them", flush=True)
    return republish
