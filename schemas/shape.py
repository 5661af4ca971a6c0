"""A state's shape as a version: a digest of its fields' names and types, recursively, for snapshot codecs.

A service's snapshot codec takes `shape_version(State)` as its version, computed at import; the runner stores
it with each snapshot and resumes only a snapshot of the same version (infra/runner/snapshot.py). So a state
whose fields are added, removed, renamed, reordered or retyped, at any depth, never resumes an old snapshot:
the service folds from the first event. Nobody bumps a number. The digest reads names only (classes'
qualified names, field names, Literal values), never `hash()` or `id()`, so every process computes the same.
It sees the shape, not the fold: a new rule that folds the same fields differently leaves it as it was.
"""
from __future__ import annotations

import dataclasses
import hashlib
import types
import typing
from typing import Any


def shape_version(tp: Any) -> str:
    """A short digest of `tp`'s shape (see `describe_shape`)."""
    return "shape-" + hashlib.sha256(describe_shape(tp).encode()).hexdigest()[:16]


def describe_shape(tp: Any, seen: frozenset[type] = frozenset()) -> str:
    """`tp` as text: dataclasses, pydantic models and TypedDicts by their fields in order, generics by their
    arguments, any other class by its name (a class met again inside itself, by its name only)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return f"Literal{args!r}"
    if origin is typing.Annotated:
        return describe_shape(args[0], seen)
    if origin is not None:
        name = "Union" if origin in (typing.Union, types.UnionType) else _name(origin)
        return f"{name}[{', '.join(describe_shape(a, seen) for a in args)}]"
    fields = _fields(tp) if isinstance(tp, type) and tp not in seen else None
    if fields is None:
        return _name(tp)
    inner = ", ".join(f"{name}: {describe_shape(t, seen | {tp})}" for name, t in fields)
    return f"{_name(tp)}({inner})"


def _fields(cls: type) -> list[tuple[str, Any]] | None:
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        return [(f.name, hints[f.name]) for f in dataclasses.fields(cls)]
    model_fields = getattr(cls, "model_fields", None)          # a pydantic model
    if isinstance(model_fields, dict):
        return [(name, info.annotation) for name, info in model_fields.items()]
    if hasattr(cls, "__required_keys__"):                       # a TypedDict (typing's or typing_extensions')
        return list(typing.get_type_hints(cls).items())
    return None


def _name(tp: Any) -> str:
    name = getattr(tp, "__qualname__", None)
    return name if isinstance(name, str) else repr(tp)
