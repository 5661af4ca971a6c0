"""Faster reads of a GGUF's metadata through transformers: gguf-py's maps made plain arrays (`install`).

transformers reads a GGUF (its config, its tokenizer, its weights) through gguf-py's `GGUFReader`, which maps the file
with `np.memmap` and cuts every metadata value out of that map, a string or a token at a time: a slice of a memmap runs
numpy's memmap bookkeeping (`__array_finalize__`, ~2 million calls for the bundled SmolLM2's 49k tokens and merges),
about two thirds of the read. `install()` makes the reader's read-only map a plain ndarray view of the same mapping: the
same pages and bytes, no copy, slices without the bookkeeping. A map opened for writing stays a memmap. Measured
(`benchmarks/gguf_tokenizer.py --reads`, benchmarks/results/micro/gguf_reads.log): deriving SmolLM2's tokenizer, the
quick start's first-run walk, 5.7-6.3 CPU s against 2.0-2.1 with it, and with its weights' read 17.5 against 10.4
(medians), byte-identical tokenizer folders and weights (2026-12-06, a loaded 2-core box).
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


def install_for(source) -> None:
    """`install()` where a resolved model source (infra/model_source.py) is a GGUF: before transformers reads it."""
    if source.gguf_file is not None:
        install()
