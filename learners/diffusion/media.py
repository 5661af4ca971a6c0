"""Images and captions of one learner: the diffusion data contract read, split, decoded to pixels and batched."""
from __future__ import annotations

import io
import random
from collections.abc import Iterator
from pathlib import Path

import torch

from yeto.learners.data.diffusion import MediaItem, read_media
from yeto.learners.diffusion.recipe import DiffusionRecipe


def split_items(recipe: DiffusionRecipe) -> tuple[list[MediaItem], list[MediaItem]]:
    """(train, held-out) items; every k-th image is held out, k = 1 / heldout_fraction (none at 0)."""
    report = read_media(recipe.data)
    if not report.ok:
        raise ValueError(f"--data {recipe.data}: " + "; ".join(report.bad_rows[:5] or ["no images"]))
    if videos := [i for i in report.items if i.kind != "image"]:
        raise ValueError(f"--data {recipe.data}: {len(videos)} video row(s) ({videos[0].path}); the diffusion "
                         "learner trains on images only (video is not supported yet: docs/DIFFUSION.md)")
    items = report.items
    if recipe.heldout_fraction <= 0:
        return items, []
    every = max(2, round(1 / recipe.heldout_fraction))
    return [x for i, x in enumerate(items) if i % every], [x for i, x in enumerate(items) if not i % every]


def pixels(item: MediaItem, resolution: int) -> torch.Tensor:
    """The image as (3, resolution, resolution) in [-1, 1]: shorter side resized, then center-cropped."""
    import numpy as np
    from PIL import Image

    media = item.media
    if item.path is not None and Path(item.path).is_file():
        image = Image.open(item.path)
    else:
        raw = media.get("bytes") if isinstance(media, dict) else media
        image = Image.open(io.BytesIO(raw))
    image = image.convert("RGB")
    scale = resolution / min(image.size)
    w, h = max(resolution, round(image.width * scale)), max(resolution, round(image.height * scale))
    image = image.resize((w, h), Image.Resampling.BICUBIC)
    left, top = (w - resolution) // 2, (h - resolution) // 2
    image = image.crop((left, top, left + resolution, top + resolution))
    array = torch.from_numpy(np.asarray(image, dtype=np.float32).copy()).permute(2, 0, 1)
    return array / 127.5 - 1.0


def batch(items: list[MediaItem], resolution: int) -> tuple[torch.Tensor, list[str]]:
    return torch.stack([pixels(i, resolution) for i in items]), [i.caption for i in items]


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
            yield batch([mine[i] for i in order[start:start + recipe.micro_batch]], recipe.resolution)
