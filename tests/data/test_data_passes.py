"""The pipeline reads and tokenizes a shard in passes that start small (the first step waits for a few blocks, not for
2048 rows): the blocks, their rows and a bad row's error are the same as with every pass BATCH rows long."""
from __future__ import annotations

import pytest

from conftest import chat, write_jsonl
from yeto.learners.data import BadRowError, DataSpec, iter_blocks, pipeline


def test_passes_start_small_double_and_cover_every_row_once():
    got = list(pipeline.passes(5000, 64))
    assert got[:3] == [(0, 64), (64, 192), (192, 448)] and got[-1][1] == 5000
    assert all(hi == lo2 for (_, hi), (lo2, _) in zip(got, got[1:]))
    assert max(hi - lo for lo, hi in got) == pipeline.BATCH
    assert list(pipeline.passes(0, 64)) == [] and list(pipeline.passes(3, pipeline.BATCH)) == [(0, 3)]


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_small_first_passes_give_the_blocks_of_full_passes(tmp_path, plain_tokenizer, monkeypatch, split):
    rows = [chat(f"question {i} " * (1 + i % 7), f"answer {i} " * (1 + i % 11)) for i in range(700)]
    spec = DataSpec(source=str(write_jsonl(tmp_path / "d.jsonl", rows)), seq_len=64, seed=3, heldout_fraction=0.1)

    def blocks(first: int) -> list[tuple[list[int], list[int], list[int]]]:
        monkeypatch.setattr(pipeline, "FIRST", first)
        return [(b.input_ids, b.labels, b.row_ids)
                for b in iter_blocks(spec, plain_tokenizer, shard=1, num_shards=2, split=split)]

    ramped, whole = blocks(8), blocks(pipeline.BATCH)
    assert len(ramped) > 10 and ramped == whole


def test_a_bad_row_in_a_later_pass_is_still_refused(tmp_path, plain_tokenizer, monkeypatch):
    rows = [chat(f"q{i}", f"a{i}") for i in range(300)]
    rows[250] = {"messages": [{"role": "alien", "content": "x"}]}
    p = write_jsonl(tmp_path / "b.jsonl", rows)
    monkeypatch.setattr(pipeline, "FIRST", 4)
    with pytest.raises(BadRowError, match=rf"{p} line 251: message 1: unknown role 'alien'"):
        list(iter_blocks(DataSpec(source=str(p)), plain_tokenizer, shard=0, num_shards=1))
