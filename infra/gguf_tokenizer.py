"""A GGUF model's tokenizer, derived once through transformers and kept as a tokenizer folder in a cache (`load`).

transformers derives a GGUF's tokenizer by walking all of the file's metadata, twice, on every load (about 10 s for
the bundled SmolLM2 on an idle 2-core machine, several times that under load); the folder it saves loads in a fraction
of a second, without torch through tokenizer_files.py or through transformers (learners/torch/model.py). The folder
lies under $YETO_HOME/cache/tokenizers/, named by the sha256 of the GGUF's metadata bytes (gguf_header.py: where its
tokenizer and chat template live) and the transformers and tokenizers versions that derived it. How a folder is
written, checked against its manifest and refused: gguf_cache.py. What it holds is read as untrusted input: JSON,
the Rust tokenizer's parser, the chat template in a sandboxed Jinja.
"""
from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path

from yeto.infra import gguf_reads
from yeto.infra.gguf_cache import MANIFEST, FolderCache
from yeto.infra.gguf_header import metadata_digest

__all__ = ["MANIFEST", "cache_key", "cache_root", "cached_folder", "load", "store"]
FORMAT = 1                     # this folder layout; a new one derives every folder again


def cache_key(source) -> str | None:
    """The folder name for a resolved GGUF source; None where it is no GGUF or its metadata cannot be walked."""
    if source.gguf_file is None or (digest := metadata_digest(Path(source.location) / source.gguf_file)) is None:
        return None
    derived_by = [FORMAT, digest, version("transformers"), version("tokenizers")]
    return hashlib.sha256(json.dumps(derived_by).encode()).hexdigest()[:40]


CACHE = FolderCache("tokenizers", cache_key, max_file_bytes=64 << 20)   # a 256k vocabulary's tokenizer.json: ~20 MB


def cache_root() -> Path:
    return CACHE.root()


def cached_folder(source) -> Path | None:
    """The checked tokenizer folder derived from the source's GGUF; None: not derived yet, or refused and removed."""
    return CACHE.cached_folder(source)


def store(source, tokenizer) -> Path | None:
    """Saves `tokenizer`, transformers' read of the source's GGUF, as its cached folder (None: none written)."""
    return CACHE.store(source, lambda folder: tokenizer.save_pretrained(str(folder)))


def load(source):
    """The tokenizer (with its chat template) that belongs to a resolved model source, its pad token eos where it has
    none. A GGUF's is read from the file once, then from the folder that read was saved to (the same files, without the
    walk: 6.9 CPU s against 0.3 for the bundled SmolLM2); one process of a host derives it while the others wait
    (FolderCache.deriving). The learners (learners/torch/model.py) and the finalizer's artifact read it here."""
    import contextlib

    from transformers import AutoTokenizer

    with CACHE.deriving(source) if source.gguf_file is not None else contextlib.nullcontext():
        folder = cached_folder(source) if source.gguf_file is not None else None
        if folder is not None:
            tok = AutoTokenizer.from_pretrained(str(folder))
            tok.name_or_path = source.location
        else:
            gguf_reads.install_for(source)
            tok = AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file, revision=source.revision)
            if source.gguf_file is not None:
                store(source, tok)
    if tok.pad_token is None:   # packed training never pads, but collators and generate want one
        tok.pad_token = tok.eos_token
    return tok
