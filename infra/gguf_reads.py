"""Faster reads of a GGUF's metadata through transformers: gguf-py's maps made plain arrays (`install`).

transformers reads a GGUF (its config, its tokenizer, its weights) through gguf-py's `GGUFReader`, which maps the file
with `np.memmap` and cuts every metadata value out of that map, a string or a token at a time: a slice of a memmap runs
numpy's memmap bookkeeping (`__array_finalize__`, ~2 million calls for the bundled SmolLM2's 49k tokens and merges),
about two thirds of the read. `install()` makes the reader's read-only map a plain ndarray view of the same mapping: the
same pages and bytes, no copy, slices without the bookkeeping. A map opened for writing stays a memmap. Measured
(`benchmarks/gguf_tokenizer.py --reads`): deriving SmolLM2's tokenizer, the quick start's first-run walk, 5.6-6.1 CPU s
against 2.1-2.3 with it, byte-identical saved folders (2026-12-06, a loaded 2-core box); the config and the weights'
reads take the same path.
"""
from __future__ import annotations

import numpy as np


class _Numpy:
    """numpy as gguf-py's reader module sees it, but for `memmap` of a file opened read-only."""

    def __getattr__(self, name: str):
        return getattr(np, name)

    @staticmethod
    def memmap(filename, dtype=np.uint8, mode="r+", *args, **kwargs):
        mapped = np.memmap(filename, dtype, mode, *args, **kwargs)
        return mapped.view(np.ndarray) if mode == "r" else mapped     # the view keeps the map (its base) alive


def install() -> bool:
    """Idempotent; False where gguf-py is not installed (transformers then refuses a GGUF with its own message)."""
    try:
        from gguf import gguf_reader
    except ImportError:
        return False
    if not isinstance(gguf_reader.np, _Numpy):
        gguf_reader.np = _Numpy()
    return True
