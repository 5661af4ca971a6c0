"""Training and held-out batches for the MLX learner: yeto.learners.data blocks stacked as MLX arrays.

Packed documents keep to themselves: the additive mask is causal within a segment (padding, segment 0, sees only
itself), the same mask learners/data/collate.py builds for torch.
"""
from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import mlx.core as mx
import numpy as np

from yeto.learners.data import DataSpec, iter_blocks
from yeto.learners.lm_recipe import TrainRecipe

NEG = -1e9     # additive mask value: exp() underflows to 0 in f32 and bf16 alike, with no -inf NaNs


def data_spec(recipe: TrainRecipe, *, eval_data: bool = False) -> DataSpec:
    if not recipe.data:
        raise ValueError("the recipe has no data: set `data` to a chat JSONL file, a directory or a dataset id")
    source, fraction = (recipe.eval_data, 0.0) if eval_data else (recipe.data, recipe.heldout_fraction)
    return DataSpec(source=source, data_format=recipe.data_format, seq_len=recipe.seq_len, seed=recipe.seed,
                    train_on=recipe.train_on, heldout_fraction=fraction, field_map=recipe.field_map or None)


def collate(blocks: list) -> dict[str, mx.array]:
    segments = np.array([b.segment_ids for b in blocks])
    seq = segments.shape[1]
    allowed = (segments[:, :, None] == segments[:, None, :]) & np.tril(np.ones((seq, seq), dtype=bool))
    allowed = np.where((segments == 0)[:, :, None], np.eye(seq, dtype=bool), allowed)
    return {"input_ids": mx.array(np.array([b.input_ids for b in blocks], dtype=np.int32)),
            "labels": mx.array(np.array([b.labels for b in blocks], dtype=np.int32)),
            "position_ids": mx.array(np.array([b.position_ids for b in blocks], dtype=np.int32)),
            "mask": mx.array(np.where(allowed, 0.0, NEG).astype(np.float32)[:, None])}


def _batched(blocks, size: int) -> Iterator[dict[str, mx.array]]:
    while chunk := list(islice(blocks, size)):
        yield collate(chunk)


def train_batches(recipe: TrainRecipe, tokenizer, *, shard: int, num_shards: int) -> Iterator[dict[str, mx.array]]:
    """Endless full micro-batches of this island's shard, one reshuffled epoch after another."""
    epoch = 0
    while True:
        blocks = iter_blocks(data_spec(recipe), tokenizer, shard=shard, num_shards=num_shards, epoch=epoch, split="train")
        num_batches = 0
        for batch in _batched(blocks, recipe.micro_batch):
            if batch["input_ids"].shape[0] == recipe.micro_batch:
                num_batches += 1
                yield batch
        if num_batches == 0:
            raise ValueError(f"shard {shard} of {num_shards} has fewer than micro_batch={recipe.micro_batch} blocks "
                             f"of {recipe.seq_len} tokens: add data, or lower micro_batch or seq_len")
        epoch += 1


def heldout_batches(recipe: TrainRecipe, tokenizer, *, max_blocks: int = 64, batch_size: int = 4) -> list:
    own = bool(recipe.eval_data)
    blocks = islice(iter_blocks(data_spec(recipe, eval_data=own), tokenizer, shard=0, num_shards=1,
                                split="train" if own else "heldout"), max_blocks)
    return list(_batched(blocks, batch_size))
