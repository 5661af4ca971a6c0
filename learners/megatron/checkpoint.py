"""A Hugging Face Mixtral checkpoint into this rank's Megatron model, and the island's tensors out as one.

Loading reads only the tensors this rank holds (safetensors opens lazily); the artifact is the checkpoint's own
layout (names of model.py, config.json, tokenizer files), which transformers loads as it loads the base.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from yeto.learners.diloco_sync import ArrayAdapter
from yeto.learners.megatron.model import Shape, Slot, partition_dim, shard_of, whole_shape, write_slot

CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja")


def _index(model_dir: Path) -> dict[str, Path]:
    """Which safetensors file holds each tensor."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        return {k: model_dir / v for k, v in json.loads(index.read_text())["weight_map"].items()}
    from safetensors import safe_open
    single = model_dir / "model.safetensors"
    if not single.exists():
        raise ValueError(f"megatron backend: {model_dir} has no model.safetensors (a Mixtral-style checkpoint)")
    with safe_open(str(single), "pt") as f:
        return dict.fromkeys(f.keys(), single)


def load(model_dir: Path, shape: Shape, slots: dict[str, Slot], params: dict[str, torch.nn.Parameter], *,
         ep_rank: int, tp: int = 1, tp_rank: int = 0) -> None:
    """Every tensor this rank holds, from the checkpoint (ValueError naming a missing one); a TP-split tensor is
    put together whole (the layout of TP 1) and this rank keeps its shard."""
    from safetensors import safe_open
    where = _index(model_dir)
    mine = {n: s for n, s in slots.items() if s.owner in (-1, ep_rank)}
    if missing := sorted(set(mine) - set(where)):
        raise ValueError(f"megatron backend: {model_dir} lacks {len(missing)} tensor(s), e.g. {missing[0]}")
    wholes: dict[str, torch.Tensor] = {}

    def target(megatron: str) -> torch.Tensor:
        param, dim = params[megatron], partition_dim(params[megatron], tp)
        if dim is None:
            return param
        if megatron not in wholes:
            wholes[megatron] = torch.zeros(whole_shape(param, dim, tp), dtype=param.dtype)
        return wholes[megatron]

    for file in sorted(set(where[n] for n in mine)):
        with safe_open(str(file), "pt") as f:
            for name, slot in mine.items():
                if where[name] == file:
                    write_slot(shape, name, slot, target(slot.megatron), f.get_tensor(name))
    with torch.no_grad():
        for megatron, whole in wholes.items():
            dim = partition_dim(params[megatron], tp)
            assert dim is not None
            params[megatron].copy_(shard_of(megatron, whole, dim, tp, tp_rank))


def save(arrays: ArrayAdapter, base_dir: Path, out_dir: Path) -> Path:
    """The island's tensors (read through `arrays`, rank 0) as a checkpoint beside the base's config and tokenizer."""
    from safetensors.numpy import save_file
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {name: np.ascontiguousarray(arrays.read(name), dtype=np.float32) for name in arrays.names()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    for name in CONFIG_FILES:
        if (base_dir / name).exists():
            shutil.copy(base_dir / name, out_dir / name)
    return out_dir
