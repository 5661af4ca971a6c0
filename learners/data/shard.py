"""Deterministic, disjoint sharding of rows across learners and ranks, reshuffled each epoch; the heldout split."""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np


def shard_rows(num_rows: int, *, shard: int, num_shards: int, seed: int, epoch: int) -> np.ndarray:
    """Row indices of one shard, in training order: one seeded permutation per epoch, dealt round-robin.

    Every row is in exactly one shard per epoch, and the same (num_rows, seed, epoch, num_shards) always deals
    the same rows, so a restarted learner recomputes its shard exactly.
    """
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard must be in [0, {num_shards}), got {shard}")
    order = np.random.default_rng([seed, epoch]).permutation(num_rows)
    return order[shard::num_shards]


def shard_of(learner_index: int, rank: int, ranks_per_learner: int) -> int:
    """The shard of one data-parallel rank of one learner island: learners own contiguous shard ranges."""
    if not 0 <= rank < ranks_per_learner:
        raise ValueError(f"rank must be in [0, {ranks_per_learner}), got {rank}")
    return learner_index * ranks_per_learner + rank


def is_heldout(row: dict[str, Any], fraction: float) -> bool:
    """Held out by a hash of the row's content: stable across files, shards and epochs; duplicates stay together."""
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction
