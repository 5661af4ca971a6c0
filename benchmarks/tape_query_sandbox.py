"""What a tape query costs when it runs outside the tape writer's process: in-process (the old way) against the sandbox
over a copy of the tape (infra/tape/responder.py), side by side on the same tape.

    python benchmarks/tape_query_sandbox.py [--events 1000000] [--reps 10]

Arms, one tape of --events LearnerProgress rows (DuckDB file, no NATS: the responder's own path):
  inproc   the query on a cursor of the writer's connection (what the writer did before)
  same     Responder.answer on an unchanged tape: the copy is reused, a spare process answers
  moved    Responder.answer after one more event: CHECKPOINT, `cp` of the file, then a spare process answers
Also the file's size and the CHECKPOINT + copy time alone. Last line: the median latencies and moved / inproc.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from yeto.infra.tape.responder import Responder, encode_reply
from yeto.infra.tape.store import TapeStore

SQL = "select learner, count(*), max(seq) from learner_progress group by 1"
EVENT = json.dumps({"ts": "2026-12-05T00:00:00+00:00", "run_id": "r-b", "type": "LearnerProgress", "version": 1,
                    "source": "l0", "learner": "l0", "step": 5, "loss": 2.5, "tokens": 100, "tokens_per_s": 10.0,
                    "step_time_s": 0.1, "lr": 0.001})
SUBJECT = "yeto.evt.r-b.LearnerProgress.l0"


def fill(store: TapeStore, n: int) -> None:
    for lo in range(0, n, 5000):
        seqs = list(range(store.last_seq + 1, store.last_seq + 1 + min(5000, n - lo)))
        store.append(seqs, [SUBJECT] * len(seqs), [EVENT] * len(seqs))


async def timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - start)
    return out


async def main_async(events: int, reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = TapeStore(Path(tmp) / "tape.duckdb")
        fill(store, events)
        start = time.perf_counter()
        store.con.execute("CHECKPOINT")
        proc = await asyncio.create_subprocess_exec("cp", str(store.path), str(Path(tmp) / "copy.duckdb"))
        await proc.wait()
        print(f"tape {events} events, {store.path.stat().st_size / 2**20:.1f} MiB; CHECKPOINT + cp "
              f"{(time.perf_counter() - start) * 1000:.0f} ms")
        lock = asyncio.Lock()
        responder = Responder(store, lock, timeout_s=60, max_payload=8 << 20)
        request = json.dumps({"sql": SQL}).encode()

        async def inproc() -> None:
            cur = store.reader()
            try:
                encode_reply(cur, SQL, max_rows=1000, max_bytes=8 << 20)
            finally:
                cur.close()

        async def same() -> None:
            assert b"error" not in await responder.answer(request)

        async def moved() -> None:
            fill(store, 1)
            assert b"error" not in await responder.answer(request)

        await same()                    # the first copy and a warm spare
        arms = {"inproc": await timed(inproc, reps), "same": await timed(same, reps), "moved": await timed(moved, reps)}
        await responder.close()
        store.close()
        medians = {k: statistics.median(v) * 1000 for k, v in arms.items()}
        for k, v in arms.items():
            print(f"  {k:<7} median {medians[k]:7.1f} ms  (min {min(v) * 1000:.1f}, max {max(v) * 1000:.1f})")
        print(f"inproc {medians['inproc']:.1f} ms, same {medians['same']:.1f} ms, moved {medians['moved']:.1f} ms; "
              f"moved / inproc = {medians['moved'] / medians['inproc']:.1f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="rows on the tape (default 1000000)")
    p.add_argument("--reps", type=int, default=10, help="queries per arm (default 10)")
    a = p.parse_args()
    asyncio.run(main_async(a.events, a.reps))


if __name__ == "__main__":
    main()
