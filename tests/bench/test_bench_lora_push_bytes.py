"""benchmarks/lora_task.py's push_bytes: the bytes the learners pushed, read from a real tape (DuckDB, the tape's own
schema and append), so a replaced learner's pushes count beside its successor's (each island's closing `sync` log
line shows its newest generation only: a replaced island read 0 there)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lora_task  # noqa: E402

from yeto.infra.tape.store import TapeStore  # noqa: E402
from yeto.schemas import codecs  # noqa: E402
from yeto.schemas.base import to_bytes  # noqa: E402
from yeto.schemas.training import GlobalVersionPublished, RoundMerged  # noqa: E402


def merged(run: str, n: int, fragment: int, responders: list[str]) -> RoundMerged:
    return RoundMerged(id=f"{run}-rm-{n}", run_id=run, source="syncer", fragment=fragment, global_version=n,
                       responders=responders, weights=[1 / len(responders)] * len(responders), staleness=[0] * len(responders),
                       tokens=512, grace_ms=0.0, quorum_ms=1.0, merge_ms=1.0, delta_norm=0.1, merge="rda")


def published(run: str, fragment: int, version: int, num_bytes: int) -> GlobalVersionPublished:
    return GlobalVersionPublished(id=f"{run}-gv-{fragment}-{version}", run_id=run, source="syncer", fragment=fragment,
                                  global_version=version, keyframe=version == 0, num_bytes=num_bytes)


def tape_of(tmp_path: Path, run: str, codec_up: str, events: list) -> TapeStore:
    store = TapeStore(tmp_path / "tape.duckdb")
    launched = json.dumps({"type": "RunLaunched", "version": 1, "run_id": run, "source": "launcher", "id": f"{run}-rl",
                           "ts": "2026-12-05T18:00:00Z", "recipe": {"train": {"sync": {"codec_up": codec_up}}}})
    raws = [launched, *(to_bytes(e).decode() for e in events)]
    subjects = [f"yeto.evt.{run}.RunLaunched", *(f"yeto.evt.{e.run_id}.{e.type}" for e in events)]
    store.append(list(range(1, len(raws) + 1)), subjects, raws)
    return store


def test_a_replaced_islands_pushes_count_with_its_successors(tmp_path):
    run, numel = "lora-default-s3-docqa", {0: 1000, 1: 2000}
    # island-1's generation 0 merges in the first round of each fragment, is replaced, and generation 1 (the same
    # learner name) merges in fragment 0's second round; island-0 merges in every round. Another run's round and
    # fragment 0's later versions (deltas, not sizes) must not count.
    events = [published(run, 0, 0, 4 * numel[0]), published(run, 1, 0, 4 * numel[1]), published(run, 0, 1, 777),
              merged(run, 1, 0, ["island-0", "island-1"]), merged(run, 2, 1, ["island-0", "island-1"]),
              merged(run, 3, 0, ["island-1", "island-0"]), merged(run, 4, 1, ["island-0"]),
              merged("another-run", 5, 0, ["island-0", "island-1"])]
    store = tape_of(tmp_path, run, "q4", events)
    try:
        got = lora_task.push_bytes(lambda q: store.con.execute(q).fetchall(), run)
    finally:
        store.close()
    q4 = {p: codecs.Q4.encoded_size(n) for p, n in numel.items()}
    assert got["bytes_up_by_learner"] == {"island-0": 2 * q4[0] + 2 * q4[1], "island-1": 2 * q4[0] + q4[1]}
    assert got["bytes_up_init"] == 4 * 3000
    assert got["bytes_up"] == 4 * 3000 + 4 * q4[0] + 3 * q4[1] and got["codec_up"] == "q4"
    assert got["push_set_bytes"] == q4[0] + q4[1]


def test_the_runs_codec_sizes_its_pushes(tmp_path):
    run = "lora-sparse-s0-docqa"
    store = tape_of(tmp_path, run, "topk4", [published(run, 0, 0, 4 * 4096), merged(run, 1, 0, ["island-0", "island-1"])])
    try:
        got = lora_task.push_bytes(lambda q: store.con.execute(q).fetchall(), run)
    finally:
        store.close()
    assert got["bytes_up"] == 4 * 4096 + 2 * codecs.codec("topk4").encoded_size(4096)


def test_a_run_the_tape_lacks_has_no_bytes(tmp_path):
    store = tape_of(tmp_path, "other", "q4", [])
    try:
        got = lora_task.push_bytes(lambda q: store.con.execute(q).fetchall(), "missing")
    finally:
        store.close()
    assert got["bytes_up"] is None
