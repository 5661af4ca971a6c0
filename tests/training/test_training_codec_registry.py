"""Codecs as objects: every registered codec round-trips through the registry, a new codec is one registered object
(learners, syncer and broadcast run on it unchanged), and no module outside schemas/codecs/ switches on a codec's name."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import tomllib

from test_training_simulation import run
from yeto.schemas import codecs
from yeto.schemas.codecs.base import OnChunk, Payload, check_size, decode_whole
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, apply_global, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import LearnerRejected, RoundMerged
from yeto.services.syncer import backend

ROOT = Path(__file__).resolve().parents[2]


class F16Codec:
    """A codec that is not shipped: IEEE half floats, with error feedback. Registered by the test alone."""

    name, error_feedback, wire = "f16", True, np.dtype("<f2")

    def decode_on(self, xp, raw, numel: int, out) -> None:
        check_size(self, raw, numel)
        out[:] = raw.view(xp.float16)[:numel].astype(xp.float32)

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        return decode_whole(self, payload, numel, out, on_chunk)

    def encode(self, x: np.ndarray) -> bytes:
        return np.asarray(x, dtype=np.float32).astype(self.wire).tobytes()

    def encoded_size(self, numel: int) -> int:
        return self.wire.itemsize * numel


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(codecs.CODECS))
def test_each_registered_codec_round_trips_through_the_registry(name):
    codec = codecs.codec(name)
    assert codec is codecs.CODECS[name] and codec.name == name and isinstance(codec.error_feedback, bool)
    x = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
    payload = codec.encode(x)
    assert len(payload) == codec.encoded_size(x.size)
    y = codec.decode(payload, x.size)
    assert y.dtype == np.float32 and np.linalg.norm(y - x) < np.linalg.norm(x)     # closer than nothing (a sparse
    assert np.dot(x, y) > 0.3 * np.dot(y, y)               # codec sends 3%); each codec's own test bounds its error
    assert codec.encode(y) == payload                  # what a receiver decodes encodes to the same bytes
    spans: list[tuple[int, int]] = []
    out = np.full(x.size, np.nan, dtype=np.float32)
    codec.decode(payload, x.size, out=out, on_chunk=lambda start, stop: spans.append((start, stop)))
    assert out.tobytes() == y.tobytes()
    assert spans[0][0] == 0 and spans[-1][1] == x.size and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    device = backend.empty(x.size)
    backend.decode_into(codec, payload, x.size, device)
    assert backend.to_host(device).tobytes() == y.tobytes()


@pytest.mark.timeout(10)
def test_an_unknown_codec_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown codec 'f16'; use one of f32, bf16, q4"):
        codecs.codec("f16")
    with pytest.raises(ValueError, match="codec_up and codec_down must be one of f32, bf16, q4"):
        SyncConfig(codec_down="f16")
    with pytest.raises(FragmentError, match="bad_header: codec: .*unknown codec 'f16'"):
        FragmentHeader.from_nats({"Yeto-Fragment": '{"run_id": "r", "fragment": 0, "numel": 1, "codec": "f16"}'})


@pytest.mark.timeout(120)
def test_a_new_codec_is_one_registered_object(monkeypatch, tmp_path):
    f16 = F16Codec()
    monkeypatch.setitem(codecs.CODECS, f16.name, f16)
    assert codecs.codec("f16") is f16
    x = np.linspace(-3, 3, 3000, dtype=np.float32)
    payload = f16.encode(x)
    header = FragmentHeader(run_id="r", fragment=0, kind="keyframe", codec="f16", numel=x.size, sha256=sha256(payload))
    assembler = ChunkAssembler()
    whole = [assembler.add(h, c) for h, c in split_chunks(header, payload, chunk_bytes=1000)][-1]
    assert apply_global(None, header, whole).tobytes() == x.astype(np.float16).astype(np.float32).tobytes()

    # learners push f16 with error feedback, the syncer decodes and broadcasts f16 deltas: it trains as with q4
    config = SyncConfig(num_fragments=4, inner_steps=8, alpha=0.5, merge="avg", codec_up="f16", codec_down="f16")
    core, bus, learners, _, _ = run(tmp_path, steps=64, config=config)
    assert all(isinstance(s.feedback, codecs.ErrorFeedback) and s.feedback.codec is f16 for s in learners)
    assert len([e for e in bus.events if isinstance(e, RoundMerged)]) >= 4 * 5
    assert not [e for e in bus.events if isinstance(e, LearnerRejected)]
    for p in learners[0].active:
        assert all(s.anchors[p].tobytes() == core.fragments[p].shadow.values.tobytes() for s in learners)


def codec_name_comparisons(source: str) -> list[str]:
    """Comparisons of something named like a codec with a registered codec's name written as a string, and codec
    fields typed as a Literal of such names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            names = [o for o in operands if _codec_names(o)]
            if names and any("codec" in ast.unparse(o).lower() for o in operands if o not in names):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.AnnAssign) and "codec" in ast.unparse(node.target).lower()
              and isinstance(node.annotation, ast.Subscript) and _codec_names(node.annotation.slice)):
            found.append(f"{node.lineno}: {ast.unparse(node.target)}: {ast.unparse(node.annotation)}")
    return found


def _codec_names(node: ast.expr) -> bool:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return any(isinstance(i, ast.Constant) and i.value in codecs.CODECS for i in items)


@pytest.mark.timeout(60)
def test_no_module_outside_the_codec_package_compares_a_codec_name_to_a_string():
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    offenders = []
    for folder in [*folders, "benchmarks", "scripts"]:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if (ROOT / "schemas" / "codecs") not in path.parents:
                offenders += [f"{path.relative_to(ROOT)}:{line}" for line in codec_name_comparisons(path.read_text())]
    assert offenders == [], "look the codec up (codecs.codec(name)) and ask the object instead"


@pytest.mark.timeout(10)
def test_the_codec_name_check_catches_a_switch_but_not_a_compute_dtype():
    bad = 'if h.codec == "q4":\n    pass\nok = config.codec_up in ("f32", "bf16")\nif "bf16" != codec:\n    pass\n'
    bad += 'class H:\n    codec: Literal["f32", "q4"] = "q4"\n'
    assert codec_name_comparisons(bad) == ["1: h.codec == 'q4'", "3: config.codec_up in ('f32', 'bf16')", "4: 'bf16' != codec",
                                           "7: codec: Literal['f32', 'q4']"]
    good = 'dtype: Literal["auto", "bf16"] = "bf16"\nif dtype == "bf16" or h.codec == codecs.F32.name:\n    pass\n'
    assert codec_name_comparisons(good) == []


def test_the_schemas_and_a_recipe_naming_codecs_import_no_kernel_until_a_codec_is_used():
    """The registry names every codec without importing its module (numba compiles the kernels there): `import
    yeto.schemas` took ~0.7 CPU s with them, ~0.3 without, in every CLI command and tape query (2026-12-06)."""
    import subprocess
    import sys

    probe = ("import sys, yeto.schemas\n"
             "from yeto.schemas import codecs\n"
             "from yeto.schemas.recipe import SyncConfig\n"
             "SyncConfig(codec_up='topk4', codec_down='bf16')\n"
             "assert 'topk8' in codecs.CODECS and 'f16' not in codecs.CODECS and len(codecs.CODECS) == 6\n"
             "print('numba' in sys.modules, sorted(m for m in sys.modules if m.startswith('yeto.schemas.codecs.')))\n"
             "q4 = codecs.codec('q4')\n"
             "assert q4 is codecs.Q4 is codecs.CODECS['q4']\n"
             "print('numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["False []", "True"], out.stdout
    with pytest.raises(ValueError, match="unknown codec 'nope'; use one of f32, bf16, q4, topk2, topk4, topk8"):
        codecs.codec("nope")
    with pytest.raises(AttributeError, match="has no attribute 'F16'"):
        codecs.F16  # noqa: B018 - the attribute read is what is tested
