"""Images or clips and captions of one learner: the diffusion data contract read, split, decoded to pixels and batched."""
from __future__ import annotations

import io
import random
from collections.abc import Iterator
from pathlib import Path

import torch

from yeto.learners.data.diffusion import MediaItem, read_media
from yeto.learners.diffusion import clips
from yeto.learners.diffusion.recipe import DiffusionRecipe


def split_items(recipe: DiffusionRecipe) -> tuple[list[MediaItem], list[MediaItem]]:
    """(train, held-out) items; every k-th item is held out, k = 1 / heldout_fraction (none at 0). With --frames 1
    every row is an image; with more, every row is a clip of at least that many frames (bad rows named)."""
    report = read_media(recipe.data)
    if not report.ok:
        raise ValueError(f"--data {recipe.data}: " + "; ".join(report.bad_rows[:5] or ["no images"]))
    if recipe.frames > 1:
        if bad := clips.clip_errors(report.items, recipe.frames):
            raise ValueError(f"--data {recipe.data}: {len(bad)} bad clip row(s): " + "; ".join(bad[:5]))
    elif videos := [i for i in report.items if i.kind != "image"]:
        raise ValueError(f"--data {recipe.data}: {len(videos)} video row(s) ({videos[0].path}) and --frames 1: "
                         "give --frames N to train on clips (a video family: docs/DIFFUSION.md)")
    items = report.items
    if recipe.heldout_fraction <= 0:
        return items, []
    every = max(2, round(1 / recipe.heldout_fraction))
    return [x for i, x in enumerate(items) if i % every], [x for i, x in enumerate(items) if not i % every]


def _tensor(image) -> torch.Tensor:
    import numpy as np
    return torch.from_numpy(np.asarray(image, dtype=np.float32).copy()).permute(2, 0, 1) / 127.5 - 1.0


def pixels(item: MediaItem, height: int, width: int | None = None) -> torch.Tensor:
    """The image as (3, height, width) in [-1, 1]: resized to cover it (shorter side), then center-cropped."""
    from PIL import Image

    media = item.media
    if item.path is not None and Path(item.path).is_file():
        image = Image.open(item.path)
    else:
        raw = media.get("bytes") if isinstance(media, dict) else media
        image = Image.open(io.BytesIO(raw))
    return _tensor(clips.fit(image, height, width or height))


def clip(item: MediaItem, frames: int, height: int, width: int) -> torch.Tensor:
    """The clip as (3, frames, height, width) in [-1, 1]: frames sampled evenly, each fitted as an image is."""
    return torch.stack([_tensor(f) for f in clips.clip_frames(item, frames, height, width)], dim=1)


def batch(items: list[MediaItem], recipe: DiffusionRecipe) -> tuple[torch.Tensor, list[str]]:
    """(B, 3, H, W) images, or (B, 3, F, H, W) clips with --frames above 1, and their captions."""
    h, w = recipe.media_height, recipe.media_width
    if recipe.frames > 1:
        return torch.stack([clip(i, recipe.frames, h, w) for i in items]), [i.caption for i in items]
    return torch.stack([pixels(i, h, w) for i in items]), [i.caption for i in items]


def train_batches(items: list[MediaItem], recipe: DiffusionRecipe, *, shard: int,
                  num_shards: int) -> Iterator[tuple[torch.Tensor, list[str]]]:
    """Endless micro-batches of this shard's images, one reshuffled epoch after another (full batches only)."""
    mine = items[shard::num_shards]
    if len(mine) < recipe.micro_batch:
        raise ValueError(f"--data {recipe.data}: {len(items)} training images leave shard {shard} of {num_shards} "
                         f"{len(mine)}, fewer than micro_batch {recipe.micro_batch}; add images or use fewer islands")
    for epoch in range(1 << 62):
        order = list(range(len(mine)))
        random.Random(recipe.seed * 1_000_003 + epoch).shuffle(order)
        for start in range(0, len(order) - recipe.micro_batch + 1, recipe.micro_batch):
            yield batch([mine[i] for i in order[start:start + recipe.micro_batch]], recipe)
