"""The layout a learner declares: which trainable tensor lives in which fragment, in which order.

Published once per learner generation, so the tape says what the run trains, and the finalizer can
turn the syncer's flat f32 fragments back into named tensors without sharing a file with anyone.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from yeto.schemas.base import Event, registry


class TensorEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    shape: list[int]
    dtype: str
    fragment: int


@registry.register
class LayoutDeclared(Event):
    """A learner's fragment layout: tensors in fragment order; the fingerprint the syncer admits by."""

    type: Literal["LayoutDeclared"] = "LayoutDeclared"
    version: Literal[1] = 1
    learner: str
    generation: int = 0
    fingerprint: str
    num_fragments: int
    tensors: list[TensorEntry]


EXAMPLES = [
    LayoutDeclared(id="ex-layout-declared", run_id="r-demo", source="island-0", learner="island-0", fingerprint="ab12" * 16,
                   num_fragments=2, tensors=[
                       TensorEntry(name="model.layers.0.self_attn.q_proj.lora_A.default.weight", shape=[8, 64], dtype="float32",
                                   fragment=0),
                       TensorEntry(name="model.layers.1.self_attn.q_proj.lora_A.default.weight", shape=[8, 64], dtype="float32",
                                   fragment=1)]),
]
