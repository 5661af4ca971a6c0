"""Wire codecs for fragment payloads: objects behind one protocol (base.py), and the registry naming them.

    codec(header.codec).decode(payload, header.numel)    # by protocol id; ValueError names the known codecs
    F32.encode(values)                                   # keyframes and initial values are f32 by protocol

A new codec is one module here implementing `Codec` and one entry in CODECS. Nothing outside this package
switches on a codec's name (tests/training/test_training_codec_registry.py checks it).
"""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from yeto.schemas.codecs.base import Codec, check_size
from yeto.schemas.codecs.bf16 import BF16Codec
from yeto.schemas.codecs.f32 import F32Codec
from yeto.schemas.codecs.feedback import ErrorFeedback
from yeto.schemas.codecs.q4 import Q4Codec
from yeto.schemas.codecs.sparse import SparseCodec

__all__ = ["BF16", "CODECS", "F32", "Q4", "Codec", "CodecName", "ErrorFeedback", "check_size", "codec"]

F32, BF16, Q4 = F32Codec(), BF16Codec(), Q4Codec()
CODECS: dict[str, Codec] = {c.name: c for c in (F32, BF16, Q4, SparseCodec(2), SparseCodec(4), SparseCodec(8))}


def codec(name: str) -> Codec:
    """The registered codec whose protocol id is `name`; ValueError naming the known ones otherwise."""
    found = CODECS.get(name)
    if found is None:
        raise ValueError(f"unknown codec {name!r}; use one of {', '.join(CODECS)}")
    return found


CodecName = Annotated[str, AfterValidator(lambda name: codec(name).name)]
"""A pydantic field holding a registered codec's protocol id."""
