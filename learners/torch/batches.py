"""Training and held-out batches of one rank, from yeto.learners.data blocks."""
from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import torch

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.evaluate import batched


def data_spec(recipe: TrainRecipe, *, eval_data: bool = False):
    """The training data's spec; with `eval_data`, the recipe's own held-out data read whole (no split)."""
    from yeto.learners.data.spec import DataSpec
    if not recipe.data:
        raise ValueError("the recipe has no data: set `data` to a chat JSONL file, a directory or a dataset id")
    source, fraction = (recipe.eval_data, 0.0) if eval_data else (recipe.data, recipe.heldout_fraction)
    return DataSpec(source=source, data_format=recipe.data_format, seq_len=recipe.seq_len, seed=recipe.seed,
                    train_on=recipe.train_on, heldout_fraction=fraction, field_map=recipe.field_map or None,
                    on_bad_rows=recipe.on_bad_rows)


def _data():
    from functools import partial

    from yeto.learners.data import collate, iter_blocks
    # "packed": transformers derives the block-diagonal causal mask from position_ids restarting at each
    # document, with no (seq x seq) mask tensor and no mask/compute dtype mismatch under bf16 autocast.
    return iter_blocks, partial(collate, attention="packed")


def train_batches(recipe: TrainRecipe, tokenizer, *, shard: int, num_shards: int,
                  epoch: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Endless micro-batches of this rank's shard, one reshuffled epoch after another (full batches only,
    so every rank of an island steps in lockstep)."""
    iter_blocks, collate = _data()
    spec = data_spec(recipe)
    while True:
        num_batches = 0
        blocks = iter_blocks(spec, tokenizer, shard=shard, num_shards=num_shards, epoch=epoch, split="train")
        for batch in batched(blocks, recipe.micro_batch, collate):
            if batch["input_ids"].shape[0] == recipe.micro_batch:
                num_batches += 1
                yield batch
        if num_batches == 0:
            raise ValueError(f"shard {shard} of {num_shards} has fewer than micro_batch={recipe.micro_batch} blocks "
                             f"of {recipe.seq_len} tokens: add data, or lower micro_batch or seq_len")
        epoch += 1


def heldout_batches(recipe: TrainRecipe, tokenizer, *, max_blocks: int = 64,
                    batch_size: int = 4) -> list[dict[str, torch.Tensor]]:
    """The first `max_blocks` held-out blocks (the held-out split, or `eval_data` whole; unsharded), collated."""
    iter_blocks, collate = _data()
    own = bool(recipe.eval_data)
    blocks = islice(iter_blocks(data_spec(recipe, eval_data=own), tokenizer, shard=0, num_shards=1,
                                split="train" if own else "heldout"), max_blocks)
    return list(batched(blocks, batch_size, collate))
