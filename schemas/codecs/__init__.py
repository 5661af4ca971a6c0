"""Wire codecs for fragment payloads: objects behind one protocol (base.py), and the registry naming them.

    codec(header.codec).decode(payload, header.numel)    # by protocol id; ValueError names the known codecs
    F32.encode(values)                                   # keyframes and initial values are f32 by protocol

A new codec is one module here implementing `Codec` and one entry in CODECS. Nothing outside this package
switches on a codec's name (tests/training/test_training_codec_registry.py checks it).

The codecs' modules define compiled kernels (numba) as they import, so the registry names every codec at once and
makes each at its first read: the recipe's schema checks codec names, and every process that parses a message (each
CLI command, the tape's queries) imported numba through it (`import yeto.schemas`: ~0.7 CPU s with it, ~0.3 without,
2026-12-06). `F32`, `BF16`, `Q4`, `Codec`, `ErrorFeedback` and `check_size` are this module's attributes as before,
made when first read.
"""
from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator

if TYPE_CHECKING:
    from yeto.schemas.codecs.base import Codec, check_size
    from yeto.schemas.codecs.bf16 import BF16Codec
    from yeto.schemas.codecs.f32 import F32Codec
    from yeto.schemas.codecs.feedback import ErrorFeedback
    from yeto.schemas.codecs.q4 import Q4Codec

    F32: F32Codec
    BF16: BF16Codec
    Q4: Q4Codec

__all__ = ["BF16", "CODECS", "F32", "Q4", "Codec", "CodecName", "ErrorFeedback", "check_size", "codec"]


class Registry(MutableMapping[str, "Codec"]):
    """The codecs by protocol id: every name known at once, each object made at its first read (its module imported
    then) and the same object from then on. Registering one (`CODECS[name] = obj`) is as with a dict."""

    def __init__(self, makers: dict[str, Callable[[], Codec]]) -> None:
        self._makers, self._made, self._lock = dict(makers), dict[str, "Codec"](), threading.Lock()

    def __getitem__(self, name: str) -> Codec:
        made = self._made.get(name)
        if made is None:
            with self._lock:       # one object per name, whichever thread reads it first
                made = self._made.get(name)
                if made is None:
                    made = self._made[name] = self._makers[name]()
        return made

    def __setitem__(self, name: str, value: Codec) -> None:
        with self._lock:
            self._makers[name], self._made[name] = (lambda: value), value

    def __delitem__(self, name: str) -> None:
        with self._lock:
            del self._makers[name]
            self._made.pop(name, None)

    def __contains__(self, name: object) -> bool:     # a name is known without making its codec (Mapping's reads it)
        return name in self._makers

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._makers))

    def __len__(self) -> int:
        return len(self._makers)


def _make(module: str, cls: str, *args: int) -> Callable[[], Codec]:
    def make() -> Codec:
        made: Codec = getattr(importlib.import_module(f"{__name__}.{module}"), cls)(*args)
        return made
    return make


CODECS: MutableMapping[str, Codec] = Registry({
    "f32": _make("f32", "F32Codec"), "bf16": _make("bf16", "BF16Codec"), "q4": _make("q4", "Q4Codec"),
    **{f"topk{k}": _make("sparse", "SparseCodec", k) for k in (2, 4, 8)}})
_ELSEWHERE = {"Codec": "base", "check_size": "base", "ErrorFeedback": "feedback"}   # attribute -> its module here


def __getattr__(name: str) -> Any:
    if name in ("F32", "BF16", "Q4"):
        return CODECS[name.lower()]
    if name in _ELSEWHERE:
        return getattr(importlib.import_module(f"{__name__}.{_ELSEWHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def codec(name: str) -> Codec:
    """The registered codec whose protocol id is `name`; ValueError naming the known ones otherwise."""
    if name not in CODECS:
        raise ValueError(f"unknown codec {name!r}; use one of {', '.join(CODECS)}")
    return CODECS[name]


CodecName = Annotated[str, AfterValidator(lambda name: codec(name).name)]
"""A pydantic field holding a registered codec's protocol id."""
