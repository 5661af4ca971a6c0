"""A GGUF model's weights and config, dequantized once by transformers and kept as a safetensors folder in a cache.

transformers dequantizes a .gguf on every load (the bundled SmolLM2-135M Q4_1: 71 s under a load of 14 on the
2-core box, against 0.23 s for the same weights from safetensors); learners read the folder instead
(learners/torch/model.py, lowmem.py). The folder lies under $YETO_HOME/cache/models/, named by the sha256 of the
whole GGUF file (the weights are not in its metadata: two files with one tokenizer and config differ there) and the
torch, transformers and safetensors versions that derived it; its weights are float32, the dtype transformers
dequantizes to, so any dtype loaded from it equals the same dtype loaded from the GGUF. Writing, the manifest
check on every read and refusal: gguf_cache.py.
"""
from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path

from yeto.infra.gguf_cache import FolderCache, file_digest

FORMAT = 1


def cache_key(source) -> str | None:
    """The folder name for a resolved GGUF source; None where it is no GGUF or the file cannot be read."""
    if source.gguf_file is None or (digest := file_digest(Path(source.location) / source.gguf_file)) is None:
        return None
    derived_by = [FORMAT, digest, version("torch"), version("transformers"), version("safetensors")]
    return hashlib.sha256(json.dumps(derived_by).encode()).hexdigest()[:40]


CACHE = FolderCache("models", cache_key, max_file_bytes=1 << 40)


def cached_folder(source) -> Path | None:
    """The checked model folder derived from the source's GGUF; None: not derived yet, or refused and removed."""
    return CACHE.cached_folder(source)


def store(source, model) -> Path | None:
    """Saves `model`, transformers' float32 read of the source's GGUF, as its cached folder (None: none written)."""
    return CACHE.store(source, lambda folder: model.save_pretrained(str(folder)))
