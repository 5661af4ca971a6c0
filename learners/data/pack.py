"""Pack documents into fixed-length blocks without cross-contamination, dropping nothing.

Each document is a segment of its block: its position ids restart at 0, its segment id is unique in the block
(1, 2, ...; padding is 0), and its first label is ignored so no loss crosses from one document into the next.
Documents are placed in order, greedily; one that does not fit the room left starts a new block and the old one
is padded. A document longer than the block is split into pieces of `seq_len` tokens (long-row policy: split),
each piece its own segment, so every token is trained on and none is dropped.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from yeto.learners.data.tokenize import IGNORE


@dataclass
class Block:
    """One training sequence of exactly seq_len tokens."""

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int]
    segment_ids: list[int]
    index: int = 0                 # position of the block in its shard and epoch (resume from index + 1)
    num_tokens: int = 0            # trainable (unpadded, unmasked) tokens
    row_ids: list[int] = field(default_factory=list)  # global row indices of the documents in this block


class Packer:
    def __init__(self, seq_len: int, pad_id: int) -> None:
        self.seq_len, self.pad_id = seq_len, pad_id
        self._new()

    def _new(self) -> None:
        self.cur = Block([], [], [], [])

    def add(self, input_ids: list[int], labels: list[int], row_id: int) -> Iterator[Block]:
        """Yield the blocks this document completes."""
        assert len(input_ids) == len(labels)
        for start in range(0, len(input_ids), self.seq_len):
            piece_ids, piece_labels = input_ids[start:start + self.seq_len], labels[start:start + self.seq_len]
            if len(self.cur.input_ids) + len(piece_ids) > self.seq_len:
                yield self.flush_block()
            self._append(piece_ids, piece_labels, row_id)
        if len(self.cur.input_ids) == self.seq_len:
            yield self.flush_block()

    def _append(self, ids: list[int], labels: list[int], row_id: int) -> None:
        block = self.cur
        segment = (block.segment_ids[-1] if block.segment_ids else 0) + 1
        block.input_ids += ids
        block.labels += [IGNORE] + labels[1:]  # the first token has no context inside its own document
        block.position_ids += range(len(ids))
        block.segment_ids += [segment] * len(ids)
        if not block.row_ids or block.row_ids[-1] != row_id:
            block.row_ids.append(row_id)

    def flush_block(self) -> Block:
        """The current block, padded to seq_len; a fresh one starts."""
        block, pad = self.cur, self.seq_len - len(self.cur.input_ids)
        block.input_ids += [self.pad_id] * pad
        block.labels += [IGNORE] * pad
        block.position_ids += range(pad)  # padding restarts positions too: it is its own segment 0
        block.segment_ids += [0] * pad
        block.num_tokens = len(block.labels) - block.labels.count(IGNORE)
        self._new()
        return block

    def finish(self) -> Iterator[Block]:
        if self.cur.input_ids:
            yield self.flush_block()
