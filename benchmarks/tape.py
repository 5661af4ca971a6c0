"""Tape throughput against raw JetStream publish throughput in one run, and aggregate SQL latency over 1M events.

    python benchmarks/tape.py [--events 200000] [--sql-events 1000000]

Arms, one real nats-server (temp dir), the same async publisher (publish_async, acks awaited per window):
  raw      publish N events with no tape writer: JetStream's publish rate (the reference)
  drain    a tape writer started on that backlog of N: its landing rate when never starved
  live     a tape writer process running while N more are published: rate from first publish to last landed
  sql      1M events appended to a fresh tape (Arrow batches), then aggregates asked of a tape writer over NATS
Last line: tape_over_publish = live landed rate / raw publish rate.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from yeto.infra.bus.nats_bus import NatsBus
from yeto.infra.nats.server import NatsServer, ensure_streams
from yeto.infra.tape.sql import ask
from yeto.infra.tape.store import TapeStore
from yeto.infra.tape.writer import TapeConfig, TapeWriter
from yeto.schemas.base import to_bytes
from yeto.schemas.subjects import event_subject
from yeto.schemas.training import LearnerProgress

WINDOW = 2000
QUERIES = {
    "count_by_type": "SELECT type, count(*) AS n, max(seq) AS last FROM events GROUP BY type",
    "runs_view": "SELECT * FROM runs",
    "loss_by_run_json": "SELECT run_id, avg(loss) FROM learner_progress GROUP BY run_id",
}


def payloads(n: int, offset: int) -> list[tuple[str, bytes, str]]:
    base = LearnerProgress(id="X", run_id="r-bench", source="bench", learner="island-0", step=1, loss=2.5,
                           tokens=4096, tokens_per_s=1000.0, step_time_s=1.0, lr=1e-4)
    text = to_bytes(base).decode()
    return [(event_subject("r-bench", "LearnerProgress"), text.replace('"id":"X"', f'"id":"b{i}"').encode(), f"b{i}")
            for i in range(offset, offset + n)]


async def publish(bus: NatsBus, msgs) -> float:
    """Raw JetStream pipelining on purpose: the reference is JetStream's own publish rate, and the bus protocol
    (one awaited ack per publish, with retries) runs about a third of it."""
    t0 = time.perf_counter()
    for start in range(0, len(msgs), WINDOW):
        futs = [await bus.js.publish_async(s, p, headers={"Nats-Msg-Id": i}) for s, p, i in msgs[start:start + WINDOW]]
        await asyncio.gather(*futs)
    return time.perf_counter() - t0


async def drain(url: str, db: Path, target: int) -> float:
    writer, stop = TapeWriter(TapeConfig(nats_url=url, db=db, consumer="bench-drain")), asyncio.Event()
    task = asyncio.create_task(writer.run(stop))
    while writer.pull is None:
        await asyncio.sleep(0.001)
        if task.done():
            task.result()      # the writer failed to start: raise its error rather than wait forever
    t0 = time.perf_counter()
    while writer.store.last_seq < target:
        await asyncio.sleep(0.002)
        if task.done():
            task.result()
    dt = time.perf_counter() - t0
    stop.set()
    await task
    return dt


async def live(url: str, bus: NatsBus, db: Path, msgs, target: int) -> tuple[float, float]:
    proc = subprocess.Popen([sys.executable, "-m", "yeto.infra.tape", "--nats-url", url, "--db", str(db),
                             "--consumer", "bench-live"], stderr=subprocess.DEVNULL)
    try:
        await wait_ready(bus)
        t0 = time.perf_counter()
        pub = await publish(bus, msgs)
        while ((await ask(bus, "SELECT max(seq) FROM events"))["rows"][0][0] or 0) < target:
            await asyncio.sleep(0.01)
        return pub, time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait()


async def wait_ready(bus: NatsBus) -> None:
    for _ in range(600):
        try:
            await ask(bus, "SELECT 1", timeout=1)
            return
        except ValueError:
            await asyncio.sleep(0.05)
    raise RuntimeError("tape writer did not start")


def fill(db: Path, n: int) -> float:
    types = ["LearnerProgress"] * 6 + ["RoundMerged", "GlobalVersionPublished", "IslandUp", "SnapshotWritten"]
    store, t0, batch = TapeStore(db), time.perf_counter(), 100_000
    for start in range(1, n + 1, batch):
        seqs = list(range(start, min(n, start + batch - 1) + 1))
        runs = [f"r-{s % 10}" for s in seqs]
        raws = [f'{{"type":"{types[s % 10]}","version":1,"id":"i{s}","run_id":"r-{s % 10}","ts":"2025-01-01T00:00:00Z",'
                f'"source":"bench","learner":"island-{s % 4}","step":{s},"loss":{1 + (s % 100) / 100},"tokens":{s}}}'
                for s in seqs]
        store.append(seqs, runs, raws)
    store.close()
    return time.perf_counter() - t0


async def sql_latency(url: str, bus: NatsBus, db: Path) -> dict[str, float]:
    proc = subprocess.Popen([sys.executable, "-m", "yeto.infra.tape", "--nats-url", url, "--db", str(db),
                             "--consumer", "bench-sql"], stderr=subprocess.DEVNULL)
    try:
        await wait_ready(bus)
        out = {}
        for name, sql in QUERIES.items():
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                await ask(bus, sql)
                times.append(time.perf_counter() - t0)
            out[name] = statistics.median(times[1:]) * 1000
        return out
    finally:
        proc.terminate()
        proc.wait()


async def main(n: int, sql_n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="yeto-bench-tape-"))
    with NatsServer(tmp / "nats") as server:
        bus = await NatsBus.connect(server.url)
        await ensure_streams(bus)
        raw_s = await publish(bus, payloads(n, 0))
        drain_s = await drain(server.url, tmp / "drain.duckdb", n)
        pub_s, live_s = await live(server.url, bus, tmp / "live.duckdb", payloads(n, n), 2 * n)
        fill_s = fill(tmp / "sql.duckdb", sql_n)
        lat = await sql_latency(server.url, bus, tmp / "sql.duckdb")
        await bus.close()
    raw, live_rate = n / raw_s, n / live_s
    print(f"raw JetStream publish:       {raw:10.0f} events/s ({n} events, window {WINDOW})")
    print(f"tape drain of the backlog:   {n / drain_s:10.0f} events/s landed")
    print(f"tape live (publish+land):    {live_rate:10.0f} events/s landed (publisher alone in that arm: {n / pub_s:.0f}/s)")
    print(f"fill {sql_n} events via Arrow: {sql_n / fill_s:10.0f} events/s")
    for name, ms in lat.items():
        print(f"sql {name:<18} over {sql_n} events via NATS: {ms:7.1f} ms (median)")
    print(f"tape_drain_events_per_s={n / drain_s:.0f}")
    print(f"sql_count_by_type_ms={lat['count_by_type']:.1f}")
    print(f"tape_over_publish={live_rate / raw:.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--sql-events", type=int, default=1_000_000)
    a = ap.parse_args()
    asyncio.run(main(a.events, a.sql_events))
