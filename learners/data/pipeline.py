"""The training stream: one shard's rows -> normalized examples -> tokens with masks -> packed blocks."""
from __future__ import annotations

import bisect
from collections.abc import Iterator

from yeto.learners.data.formats import normalize
from yeto.learners.data.pack import Block, Packer
from yeto.learners.data.roles import RowError
from yeto.learners.data.rows import Row
from yeto.learners.data.shard import is_heldout, shard_rows
from yeto.learners.data.sources import Source, open_source
from yeto.learners.data.spec import DataSpec
from yeto.learners.data.tokenize import ChatEncoder, Encoded

BATCH = 2048  # rows tokenized together: big enough for Rust batch encoding to pay off
FIRST = 64    # the first pass's rows, doubling up to BATCH: the first step needs a few blocks, not 2048 rows' worth


class BadRowError(ValueError):
    """A bad row met under --on-bad-rows error."""


def iter_blocks(spec: DataSpec, tokenizer, *, shard: int, num_shards: int, epoch: int = 0, start: int = 0,
                split: str = "train") -> Iterator[Block]:
    """Blocks of one shard for one epoch, from block `start` on (blocks before it are rebuilt and not yielded)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be train or heldout, got {split!r}")
    source = open_source(spec.source)
    encoder = ChatEncoder(tokenizer, train_on=spec.train_on)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    packer = Packer(spec.seq_len, pad_id)
    index = 0
    for block in _blocks(source, spec, encoder, packer, shard, num_shards, epoch, split):
        block.index = index
        if index >= start:
            yield block
        index += 1


def _blocks(source: Source, spec, encoder, packer, shard, num_shards, epoch, split) -> Iterator[Block]:
    order = shard_rows(len(source), shard=shard, num_shards=num_shards, seed=spec.seed, epoch=epoch)
    first = FIRST if getattr(encoder.backend, "padding", None) is None else BATCH   # padded: to each pass's longest
    for lo, hi in passes(len(order), first):
        ids = [int(i) for i in order[lo:hi]]
        rows = _get_rows(source, ids)
        examples, kept = [], []
        for gid, row in zip(ids, rows):
            if row.error is None and (is_heldout(row.value, spec.heldout_fraction) != (split == "train")):
                try:
                    examples.append(normalize(row.value, spec.data_format, spec.field_map))
                    kept.append((gid, row))
                except RowError as e:
                    _bad(spec, row, str(e))
            elif row.error is not None:
                _bad(spec, row, row.error)
        for (gid, row), enc in zip(kept, encoder.encode(examples)):
            if isinstance(enc, Encoded):
                yield from packer.add(enc.input_ids, enc.labels, gid)
            else:
                _bad(spec, row, str(enc))
    yield from packer.finish()


def passes(n: int, first: int = FIRST) -> Iterator[tuple[int, int]]:
    """[lo, hi) of the rows read and tokenized together: `first`, then twice as many each pass up to BATCH. The blocks
    are the same whatever the passes (rows are packed in order, each encoded alone: a tokenizer that pads keeps
    BATCH-row passes); a small first pass gives the first step its blocks without reading and tokenizing 2048 rows."""
    lo, size = 0, min(first, BATCH)
    while lo < n:
        yield lo, min(n, lo + size)
        lo, size = lo + size, min(BATCH, 2 * size)


def _bad(spec: DataSpec, row: Row, reason: str) -> None:
    if spec.on_bad_rows == "error":
        raise BadRowError(f"{row.where}: {reason} (run `yeto data check`, fix the row, or pass --on-bad-rows skip)")


def _get_rows(source: Source, ids: list[int]) -> list[Row]:
    """Rows by global index, fetched per file in one call each, returned in the order asked."""
    bounds, total = [], 0
    for f in source.files:
        bounds.append(total)
        total += len(f)
    wanted: dict[int, list[tuple[int, int]]] = {}
    for pos, gid in enumerate(ids):
        k = bisect.bisect_right(bounds, gid) - 1
        wanted.setdefault(k, []).append((pos, gid - bounds[k]))
    out: list[Row | None] = [None] * len(ids)
    for k, items in wanted.items():
        for (pos, _), row in zip(items, source.files[k].get_many([i for _, i in items])):
            out[pos] = row
    return out
