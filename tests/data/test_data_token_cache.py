"""The data check's encodings, kept for the learners of its host (learners/data/token_cache.py): the blocks built
from them are the blocks built by encoding; a changed file or tokenizer misses; a corrupt or hostile cache file is
a miss, never an error or a wrong token."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import PLAIN_TEMPLATE, chat, make_tokenizer, write_jsonl
from yeto.learners.data import BadRowError, DataSpec, check_data, iter_blocks, token_cache
from yeto.learners.data.tokenize import ChatEncoder


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path / "home"))
    token_cache._LOADED.clear()
    yield token_cache.cache_dir()
    token_cache._LOADED.clear()


@pytest.fixture
def data(tmp_path):
    rows = [chat(f"question number {i}", f"answer {i} " * (1 + i % 5)) for i in range(60)]
    rows[7] = {"messages": [{"role": "user", "content": "no answer"}]}           # refused by normalize
    return write_jsonl(tmp_path / "d.jsonl", rows)


def blocks(spec, tok, **kw):
    token_cache._LOADED.clear()
    return [(b.input_ids, b.labels, b.index) for b in iter_blocks(spec, tok, shard=kw.pop("shard", 0), num_shards=2, **kw)]


def spec_of(data: Path, **kw) -> DataSpec:
    return DataSpec(source=str(data), seq_len=32, heldout_fraction=0.2, on_bad_rows="skip", **kw)


def test_blocks_from_the_checks_encodings_are_the_blocks_encoding_builds(home, data, plain_tokenizer, monkeypatch):
    spec = spec_of(data)
    want = {(s, split): blocks(spec, plain_tokenizer, shard=s, split=split) for s in (0, 1) for split in ("train", "heldout")}
    report = check_data(spec, plain_tokenizer, cache=home)
    assert report.num_bad == 1 and list(home.glob("*.bin"))
    token_cache._LOADED.clear()          # this process looked before the check wrote: a miss, remembered
    cached = token_cache.rows_for(spec, plain_tokenizer, 60)
    assert cached is not None and cached.get(7) is None and cached.get(8) is not None
    encoded = []                   # only the refused row is encoded again
    real = ChatEncoder.encode
    monkeypatch.setattr(ChatEncoder, "encode", lambda self, ex: encoded.append(len(ex)) or real(self, ex))
    got = {(s, split): blocks(spec, plain_tokenizer, shard=s, split=split) for s in (0, 1) for split in ("train", "heldout")}
    assert got == want and all(want.values())
    assert sum(encoded) <= 4      # row 7, once per shard and split at most


def test_a_changed_data_file_or_tokenizer_misses(home, data, plain_tokenizer):
    spec = spec_of(data)
    check_data(spec, plain_tokenizer, cache=home)
    token_cache._LOADED.clear()
    assert token_cache.rows_for(spec, plain_tokenizer, 60) is not None
    other = make_tokenizer(PLAIN_TEMPLATE.replace("<|im_end|>\n", "<|im_end|>\n\n"))
    assert token_cache.cache_key(spec, other) != token_cache.cache_key(spec, plain_tokenizer)
    token_cache._LOADED.clear()
    assert token_cache.rows_for(spec, other, 60) is None
    assert token_cache.rows_for(spec_of(data, train_on="all"), plain_tokenizer, 60) is None
    with open(data, "a") as f:
        f.write(json.dumps(chat("one more", "row")) + "\n")
    token_cache._LOADED.clear()
    assert token_cache.rows_for(spec, plain_tokenizer, 61) is None


def corrupt_variants(text: bytes) -> dict[str, bytes]:
    head, _, body = text.partition(b"\n")
    meta = json.loads(head)
    n, t = meta["num_rows"], meta["num_tokens"]
    ids_at = 8 * n

    def with_header(**changes) -> bytes:
        return json.dumps({**meta, **changes}).encode() + b"\n" + body

    def with_id(value: int, at: int) -> bytes:
        b = bytearray(body)
        b[at:at + 4] = value.to_bytes(4, "little", signed=True)
        return head + b"\n" + bytes(b)
    return {
        "truncated": text[:-5], "garbage": b"\x00\xff" * 50, "empty": b"", "no header": body,
        "huge counts": with_header(num_tokens=2**40), "other key": with_header(key="0" * 64),
        "negative tokens": with_header(num_tokens=-1),
        "id outside the vocabulary": with_id(10**6, ids_at),
        "negative id": with_id(-5, ids_at),
        "label not its token": with_id(3, ids_at + 4 * t + 4 * 9) if t > 10 else b"",
        "offsets out of order": with_id(10**6, 8),
    }


@pytest.mark.parametrize("variant", ["truncated", "garbage", "empty", "no header", "huge counts", "other key",
                                     "negative tokens", "id outside the vocabulary", "negative id",
                                     "label not its token", "offsets out of order"])
def test_a_corrupt_or_hostile_cache_file_is_a_miss_and_training_encodes(home, data, plain_tokenizer, variant):
    spec = spec_of(data)
    want = blocks(spec, plain_tokenizer)
    check_data(spec, plain_tokenizer, cache=home)
    (path,) = home.glob("*.bin")
    path.write_bytes(corrupt_variants(path.read_bytes())[variant])
    token_cache._LOADED.clear()
    assert token_cache.rows_for(spec, plain_tokenizer, 60) is None
    assert blocks(spec, plain_tokenizer) == want


def test_a_row_the_check_refused_is_refused_again_by_training(home, data, plain_tokenizer):
    spec = DataSpec(source=str(data), seq_len=32, on_bad_rows="error")
    check_data(spec, plain_tokenizer, cache=home)
    token_cache._LOADED.clear()
    assert token_cache.rows_for(spec, plain_tokenizer, 60) is not None
    with pytest.raises(BadRowError, match="line 8"):      # in one of the two shards
        [blocks(spec, plain_tokenizer, shard=s) for s in (0, 1)]


def test_without_a_cache_folder_the_check_writes_nothing(home, data, plain_tokenizer):
    check_data(spec_of(data), plain_tokenizer)
    assert not home.exists() or not list(home.glob("*"))
