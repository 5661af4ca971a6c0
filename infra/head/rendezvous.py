"""The head's rendezvous in the run's store: the one place a cloud run says where its head answers now.

`<parent of --output>/.yeto-head/<run>/head.json`, beside the mirror (mirror.py), the record of
schemas/head_rendezvous.py (no secret). It is written by whoever learns the head's address from SkyPilot: the first
head's mirror, from its RunLaunched recipe's bus_url (the laptop put the address there), once and only when no record
is there yet (a replacement restores that same RunLaunched, with its predecessor's address in it); `yeto recover`, the
replacement's address, as soon as SkyPilot reports it. Cloud islands are told the place at launch
(LearnerArgs.head_rendezvous) and follow it when their bus is away (learners/transport/rendezvous.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable

from yeto.infra.head.mirror import mirror_root, store
from yeto.schemas.head_rendezvous import FILE, record


def place(output: str, run_id: str) -> str:
    """Where run `run_id`'s rendezvous lives, for a run whose --output is `output` (a store URI or a folder)."""
    return f"{mirror_root(output, run_id)}/{FILE}"


def publish(root: str, run_id: str, url: str, *, now: float, replace: bool = True) -> bool:
    """Write the rendezvous under mirror root `root`, saying the head answers at `url`; with `replace=False` only when
    none is there. Whether it was written."""
    fs, path = store(root)
    if not replace and fs.exists(f"{path}/{FILE}"):
        return False
    fs.makedirs(path, exist_ok=True)
    fs.pipe_file(f"{path}/{FILE}", record(run_id, url, now))
    return True


def first_head(root: str, run_id: str, url: str) -> Callable[[], None]:
    """The first head's write (mirror.keep_mirrored's `then`): its address, unless a record is there already."""
    def write() -> None:
        if url and publish(root, run_id, url, now=time.time(), replace=False):
            print(f"head of run {run_id} at {url}: written to its rendezvous {root}/{FILE}", flush=True)
    return write
