"""A snapshot codec's version is its state's shape (schemas/shape.py), the same in every process.

Any change of shape, at any depth, changes it; the same shape declared again gives the same version."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import pytest
from typing_extensions import TypedDict

from yeto.schemas.final import FinalCutRequested
from yeto.schemas.shape import describe_shape, shape_version
from yeto.services.finalizer import state as finalizer_state
from yeto.services.launcher import state as launcher_state
from yeto.services.syncer import runs as syncer_runs

CODECS = {"launcher": launcher_state, "finalizer": finalizer_state, "syncer": syncer_runs}
STATES = {"launcher": launcher_state.State, "finalizer": finalizer_state.State, "syncer": syncer_runs.SyncerState}


def inner(**annotations):
    """A test-local frozen dataclass `Inner` with these fields (name -> type), in this order."""
    return dataclass(frozen=True)(type("Inner", (), {"__annotations__": annotations}))


def outer(inner_type, **extra):
    """A test-local state `Outer` that holds `Inner`s the way the real states hold their runs."""
    annotations = {"runs": dict[str, inner_type], "seen": frozenset[tuple[int, int]], **extra}
    defaults = {"runs": field(default_factory=dict), "seen": frozenset()}
    return dataclass(frozen=True, kw_only=True)(type("Outer", (), {"__annotations__": annotations, **defaults}))


BASE = inner(step=int, loss=float | None, since=datetime | None)


def test_the_same_shape_gives_the_same_version_whoever_declares_it():
    again = inner(step=int, loss=float | None, since=datetime | None)
    assert again is not BASE and shape_version(outer(again)) == shape_version(outer(BASE))
    assert shape_version(outer(BASE)).startswith("shape-")


@pytest.mark.parametrize("changed", [
    inner(step=int, loss=float | None, since=datetime | None, tokens=int),     # a field added
    inner(step=int, loss=float | None),                                         # one removed
    inner(steps=int, loss=float | None, since=datetime | None),                 # renamed
    inner(loss=float | None, step=int, since=datetime | None),                  # reordered
    inner(step=float, loss=float | None, since=datetime | None),                # retyped
    inner(step=int, loss=float, since=datetime | None),                         # no longer optional
    inner(step=int, loss=float | None, since=datetime | None, phase=Literal["up", "down"]),
], ids=["added", "removed", "renamed", "reordered", "retyped", "not-optional", "literal"])
def test_a_change_of_shape_in_a_nested_state_changes_the_outer_version(changed):
    assert shape_version(changed) != shape_version(BASE)
    assert shape_version(outer(changed)) != shape_version(outer(BASE))


def test_containers_typed_dicts_and_pydantic_models_count_too():
    class Cut(TypedDict):
        versions: dict[int, int]

    class CutWide(TypedDict):
        versions: dict[int, float]

    assert shape_version(outer(BASE, cut=Cut)) != shape_version(outer(BASE, cut=CutWide))
    assert shape_version(outer(BASE, cut=Cut)) != shape_version(outer(BASE))
    assert shape_version(dict[str, BASE]) != shape_version(dict[int, BASE]) != shape_version(list[BASE])
    assert shape_version(outer(BASE, request=FinalCutRequested)) != shape_version(outer(BASE, request=str))
    assert "reason: Literal('budget'" in describe_shape(FinalCutRequested)


def test_the_services_codec_versions_are_their_states_shapes():
    for name, module in CODECS.items():
        assert module.CODEC_VERSION == shape_version(STATES[name]), name
    assert len({module.CODEC_VERSION for module in CODECS.values()}) == len(CODECS)


@pytest.mark.timeout(120)
def test_the_services_versions_are_the_same_in_every_process():
    """Not derived from hash(): fresh interpreters with other hash seeds compute the same versions."""
    code = ("import json; from yeto.services.launcher import state as l; from yeto.services.finalizer import state as f;"
            " from yeto.services.syncer import runs as s;"
            " print(json.dumps({'launcher': l.CODEC_VERSION, 'finalizer': f.CODEC_VERSION, 'syncer': s.CODEC_VERSION}))")
    here = {name: module.CODEC_VERSION for name, module in CODECS.items()}
    for seed in ("0", "1", "12345"):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                             capture_output=True, text=True, timeout=100, check=True).stdout
        assert json.loads(out) == here, seed
