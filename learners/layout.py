"""Deterministic fragmenting of trainable tensors and the layout fingerprint (ALGORITHM.md "Fragments").

Tensors with a transformer layer index go to fragment (layer mod P'), embeddings and lm_head share one
fragment of their own (the last, merged by plain average), and tensors without a layer index are
bin-packed by size into the smallest layer fragment. Everything is sorted by name first, so every
learner with the same model and tuning computes the same layout and the same fingerprint.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass

LAYOUT_TAG = "yeto-layout-v1"
LAYER_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")
EMBED_RE = re.compile(r"(?:^|\.)(?:embed_tokens|embed_positions|wte|wpe|word_embeddings|tok_embeddings|embeddings|lm_head)"
                      r"(?:\.|$)")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Layout:
    """Which tensors form each fragment (in order), each fragment's role, and the fingerprint of it all."""

    num_fragments: int
    fragments: tuple[tuple[TensorSpec, ...], ...]
    roles: tuple[str, ...]          # "layers" or "embed"
    fingerprint: str

    def numel(self, fragment: int) -> int:
        return sum(t.numel for t in self.fragments[fragment])

    def entries(self) -> list[dict]:
        """Tensors in fragment order as (name, shape, dtype, fragment) dicts: schemas.layout.LayoutDeclared's tensors."""
        return [dict(name=t.name, shape=list(t.shape), dtype=t.dtype, fragment=p)
                for p, frag in enumerate(self.fragments) for t in frag]

    @property
    def active(self) -> list[int]:
        """Fragments that hold at least one value (small models leave some empty)."""
        return [p for p in range(self.num_fragments) if self.numel(p) > 0]


def plan_layout(tensors: list[TensorSpec], num_fragments: int) -> Layout:
    """The deterministic layout of `tensors` over `num_fragments` fragments."""
    if num_fragments < 1:
        raise ValueError("num_fragments must be >= 1")
    tensors = sorted(tensors, key=lambda t: t.name)
    embed = [t for t in tensors if EMBED_RE.search(t.name)] if num_fragments > 1 else []
    rest = [t for t in tensors if t not in embed]
    num_layer_frags = num_fragments - (1 if embed else 0)
    bins: list[list[TensorSpec]] = [[] for _ in range(num_fragments)]
    loose = []
    for t in rest:
        layer = LAYER_RE.search(t.name)
        if layer is None:
            loose.append(t)
        else:
            bins[int(layer.group(1)) % num_layer_frags].append(t)
    for t in sorted(loose, key=lambda t: (-t.numel, t.name)):          # largest first into the emptiest
        target = min(range(num_layer_frags), key=lambda p: (sum(x.numel for x in bins[p]), p))
        bins[target].append(t)
    if embed:
        bins[-1] = embed
    fragments = tuple(tuple(sorted(b, key=lambda t: t.name)) for b in bins)
    roles = tuple("embed" if embed and p == num_fragments - 1 else "layers" for p in range(num_fragments))
    return Layout(num_fragments, fragments, roles, fingerprint(fragments))


def fingerprint(fragments: tuple[tuple[TensorSpec, ...], ...]) -> str:
    """SHA-256 over the version tag, P, and per tensor (name, shape, dtype, fragment)."""
    rows = sorted([t.name, list(t.shape), t.dtype, p] for p, frag in enumerate(fragments) for t in frag)
    blob = json.dumps([LAYOUT_TAG, len(fragments), rows], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
