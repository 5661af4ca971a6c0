"""Masked causal-LM cross-entropy: the training loss and the held-out evaluation share it."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import torch
import torch.nn.functional as F

from yeto.learners import accel as accel_policy

IGNORE_INDEX = -100
MODEL_INPUTS = ("input_ids", "position_ids", "attention_mask")


def loss_sum(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Sum of next-token cross-entropies over the labelled tokens, and their count.

    `labels` are aligned with `input_ids` (the transformers convention): token t+1's label is
    predicted at position t; IGNORE_INDEX marks prompt, padding and document-boundary tokens.
    Packed sequences pass `position_ids` that restart at each document, which transformers turns into
    a block-diagonal causal mask, so documents never attend to each other.
    """
    inputs = {k: batch[k] for k in MODEL_INPUTS if k in batch}
    logits = model(**inputs, use_cache=False).logits
    targets = batch["labels"][:, 1:]
    total = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), targets.flatten(),
                            ignore_index=IGNORE_INDEX, reduction="sum")
    return total, int((targets != IGNORE_INDEX).sum())


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]], *,
             accel: accel_policy.Accel | None = None) -> float:
    """Mean cross-entropy per labelled token over collated held-out batches (nats per token)."""
    accel = accel or accel_policy.detect(prefer="cpu")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for batch in batches:
            with accel_policy.autocast(accel):
                batch_total, batch_count = loss_sum(model, to_device(batch, accel.device))
            total, count = total + float(batch_total), count + batch_count
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("the held-out set has no labelled tokens: raise heldout_fraction or add data")
    return total / count


def batched(blocks: Iterable[Any], size: int, collate) -> Iterator[dict[str, torch.Tensor]]:
    """Collate consecutive blocks into batches of `size` (the last one may be smaller)."""
    it = iter(blocks)
    while chunk := list(islice(it, size)):
        yield collate(chunk)


def evaluate_blocks(model: torch.nn.Module, blocks: Iterable[Any], *, batch_size: int = 4,
                    accel: accel_policy.Accel | None = None) -> float:
    """`evaluate` over data blocks (yeto.learners.data), collated `batch_size` at a time."""
    from functools import partial

    from yeto.learners.data import collate
    return evaluate(model, batched(blocks, batch_size, partial(collate, attention="packed")), accel=accel)
