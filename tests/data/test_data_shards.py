"""Sharding (disjoint, covering, reshuffled per epoch), resume, the heldout split, bad-row policies, events."""
from __future__ import annotations

import pytest

from conftest import chat, write_jsonl
from yeto.learners.data import BadRowError, DataSpec, check_data, iter_blocks, shard_of
from yeto.learners.data.events import check_events
from yeto.learners.data.shard import shard_rows
from yeto.schemas import data as data_schemas
from yeto.schemas.base import parse


def test_shards_are_disjoint_cover_all_and_reshuffle_per_epoch():
    shards = [shard_rows(101, shard=s, num_shards=4, seed=3, epoch=0) for s in range(4)]
    assert sorted(int(i) for s in shards for i in s) == list(range(101))
    again = shard_rows(101, shard=1, num_shards=4, seed=3, epoch=0)
    assert list(again) == list(shards[1])
    assert list(shard_rows(101, shard=1, num_shards=4, seed=3, epoch=1)) != list(shards[1])
    assert shard_of(2, 1, ranks_per_learner=4) == 9
    with pytest.raises(ValueError, match=r"shard must be in \[0, 4\), got 4"):
        shard_rows(10, shard=4, num_shards=4, seed=0, epoch=0)


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "d.jsonl", [chat(f"question number {i}", f"answer {i} " * (1 + i % 5)) for i in range(40)])


def test_blocks_deterministic_disjoint_and_resumable(data, plain_tokenizer):
    spec = DataSpec(source=str(data), seq_len=64, seed=7)
    per_shard = [list(iter_blocks(spec, plain_tokenizer, shard=s, num_shards=3)) for s in range(3)]
    rows = [r for blocks in per_shard for b in blocks for r in b.row_ids]
    assert sorted(rows) == list(range(40))                         # disjoint, and nothing dropped
    again = list(iter_blocks(spec, plain_tokenizer, shard=1, num_shards=3))
    assert [b.input_ids for b in again] == [b.input_ids for b in per_shard[1]]
    resumed = list(iter_blocks(spec, plain_tokenizer, shard=1, num_shards=3, start=2))
    assert [b.index for b in resumed] == [b.index for b in per_shard[1][2:]]
    assert [b.input_ids for b in resumed] == [b.input_ids for b in per_shard[1][2:]]
    epoch1 = list(iter_blocks(spec, plain_tokenizer, shard=1, num_shards=3, epoch=1))
    assert [b.row_ids for b in epoch1] != [b.row_ids for b in per_shard[1]]


def test_heldout_split_is_disjoint_from_train(data, plain_tokenizer):
    spec = DataSpec(source=str(data), seq_len=64, heldout_fraction=0.25)
    train = {r for b in iter_blocks(spec, plain_tokenizer, shard=0, num_shards=1) for r in b.row_ids}
    held = {r for b in iter_blocks(spec, plain_tokenizer, shard=0, num_shards=1, split="heldout") for r in b.row_ids}
    assert held and train and not train & held and train | held == set(range(40))


def test_bad_rows_error_or_skip(tmp_path, plain_tokenizer):
    p = write_jsonl(tmp_path / "b.jsonl", [chat("q", "a"), {"messages": [{"role": "alien", "content": "x"}]}, chat("r", "b")])
    with pytest.raises(BadRowError, match=rf"{p} line 2: message 1: unknown role 'alien'"):
        list(iter_blocks(DataSpec(source=str(p)), plain_tokenizer, shard=0, num_shards=1))
    spec = DataSpec(source=str(p), on_bad_rows="skip")
    blocks = list(iter_blocks(spec, plain_tokenizer, shard=0, num_shards=1))
    assert sorted(r for b in blocks for r in b.row_ids) == [0, 2]
    cause = data_schemas.EXAMPLES[2]  # any message works as the cause; the launcher passes its LaunchRun
    checked, skipped = check_events(check_data(spec, plain_tokenizer), spec, cause)
    assert checked.num_bad == 1 and checked.masking == "prefix-rendering"
    assert skipped.num_skipped == 1 and skipped.rows[0].startswith(f"{p} line 2: message 1: unknown role")
    assert check_events(check_data(spec, plain_tokenizer), spec, cause)[0].id == checked.id  # idempotent ids


def test_data_events_round_trip():
    assert {type(e).__name__ for e in data_schemas.EXAMPLES} == {"DataChecked", "BadRowsSkipped", "ShardAssigned"}
    for event in data_schemas.EXAMPLES:
        assert parse(event.model_dump_json()) == event
