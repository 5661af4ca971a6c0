"""A run's events replayed from a stack's YETO_EVT into a tape file of its own, with the tape writer's code (its
raw-pull reader and its store): the same rows, keyed by the stream's sequences, resumed after the file's last."""
from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.bus.nats_pull import RawPull, stream_seq
from yeto.infra.tape.store import TapeStore
from yeto.schemas.final import ENDING_EVENTS
from yeto.schemas.subjects import EVT_STREAM, run_events

BATCH = 5000


@dataclass(frozen=True)
class Copied:
    rows: int                       # the run's events on the copy
    last_seq: int                   # the head's stream sequence of the newest
    ends: dict[str, int]            # ENDING_EVENTS on the copy -> the sequence of the newest of each
    written: dict | None            # the newest ArtifactWritten's payload


async def copy_tape(bus: NatsBus, run_id: str, db: Path, *, while_answered: bool = False) -> Copied:
    """Append the run's events after the copy's last sequence until none is left to deliver. The tape writer's
    reader (raw batch pulls, several times faster than a protocol fetch) on a consumer of this copy's own, filtered
    to the run; a delivery sequence that skips (pulled messages lost with a dropped connection) starts it again
    after the copy's last, as the writer does. `while_answered`: stop at the first pull no server answers instead of
    waiting for the consumer's leader (the copy after RunCopiedBack, while the head stops its stack: a stopping
    server's pulls go unanswered, and waiting for a leader held `yeto status` and `launch --wait` for
    nats_pull.UNANSWERED_RECREATE_S, 30 s, after every copy-back)."""
    store = await asyncio.to_thread(TapeStore, db)
    pull = RawPull(bus, EVT_STREAM, f"copyback-{secrets.token_hex(4)}", run_events(run_id), batch=BATCH, expires_s=0.5)
    try:
        await pull.start_at(store.last_seq + 1)
        next_delivery = 1
        while True:
            await pull.pull()
            msgs, pull.buf = pull.buf, []
            fresh, in_order = _in_order(msgs, next_delivery, store.last_seq)
            next_delivery += in_order
            if fresh:
                await asyncio.to_thread(store.append, [stream_seq(m.reply) for m in fresh],
                                        [m.subject for m in fresh],
                                        [m.data.decode("utf-8", "replace") for m in fresh])
            if msgs and in_order == len(msgs):
                await pull.ack(msgs[-1])
                continue
            if pull.unanswered and not msgs:             # no leader answered: the next pull asks whether it is there
                if while_answered:
                    break
                continue
            hole = in_order < len(msgs) or pull.recreate.is_set()
            info = None if hole else await bus.js.consumer_info(EVT_STREAM, pull.durable)
            if info is not None and info.num_pending == 0 and info.num_ack_pending == 0:
                break                                   # everything delivered and here
            if info is None or info.num_pending == 0:   # lost on the way: again after the copy's last
                await pull.start_at(store.last_seq + 1)
                next_delivery = 1
        return await asyncio.to_thread(_summary, store)
    finally:
        await _drop(pull)
        store.close()


def _in_order(msgs: list[Any], next_delivery: int, last_seq: int) -> tuple[list[Any], int]:
    """The messages to store (after `last_seq`, each once) among those delivered in order from `next_delivery`, and
    how many were in order: the consumer's delivery sequence in the ack subject (v1 or v2 form) skips at a loss."""
    fresh, in_order = [], 0
    for m in msgs:
        tokens = m.reply.split(".")
        if int(tokens[6] if len(tokens) == 9 else tokens[8]) != next_delivery + in_order:
            break
        in_order += 1
        if stream_seq(m.reply) > last_seq:
            fresh.append(m)
            last_seq = stream_seq(m.reply)
    return fresh, in_order


async def _drop(pull: RawPull) -> None:
    try:
        if pull.sub is not None:
            await pull.sub.unsubscribe()
        await pull.bus.js.delete_consumer(EVT_STREAM, pull.durable)
    except Exception:  # noqa: BLE001 - never made, or the connection is gone: it expires with the head
        pass


def _summary(store: TapeStore) -> Copied:
    (rows,) = store.con.execute("SELECT count(*) FROM events").fetchone() or (0,)
    kinds = ", ".join(f"'{t}'" for t in ENDING_EVENTS)
    ends = dict(store.con.execute(f"SELECT type, max(seq) FROM events WHERE type IN ({kinds}) GROUP BY type").fetchall())
    written = store.con.execute("SELECT payload FROM events WHERE type = 'ArtifactWritten' ORDER BY seq DESC LIMIT 1").fetchone()
    return Copied(rows=int(rows), last_seq=store.last_seq, ends=ends, written=json.loads(written[0]) if written else None)
