"""The device decode (each codec's decode_on, backend.decode_into): the same bits as its host decode for every codec and size, on
NumPy here and on CuPy where a CUDA device is usable (scripts/gpu_check.sh runs this file there). NaN stays NaN but
not bit for bit: on an H200 a NaN block decoded to CUDA's canonical NaN where NumPy keeps the scale's NaN."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.services.syncer import backend

MODULES = [np]
if backend.GPU:
    MODULES.append(backend.xp)


def payloads():
    rng = np.random.default_rng(3)
    for n in (1, 255, 256, 257, 1000, 70_001):
        x = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 6)).astype(np.float32)
        x[: min(n, 256) // 3] = 0.0                              # a zero stretch (a block with scale 0 when n >= 768)
        if n > 600:
            x[513] = np.nan                                     # a NaN block must decode to NaN (the push is refused)
            x[300] = np.float32(1e-42)                          # a subnormal
        for codec in codecs.CODECS.values():
            yield codec, n, codec.encode(x)


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__)
def test_decode_on_gives_the_bits_of_the_host_decode(mod):
    seen = 0
    for codec, n, payload in payloads():
        want = codec.decode(payload, n)
        out = mod.full(n, 7.0, dtype=mod.float32)
        codec.decode_on(mod, mod.asarray(np.frombuffer(payload, dtype=np.uint8)), n, out)
        got = out.get() if mod is not np else out
        nan = np.isnan(want)            # a NaN block stays NaN (the push is refused); CUDA gives its canonical NaN
        assert np.array_equal(np.isnan(got), nan), (codec.name, n)
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), (codec.name, n)
        seen += 1
    assert seen == 6 * len(codecs.CODECS)


def test_decode_into_and_decode_on_refuse_a_payload_of_the_wrong_size():
    out = backend.empty(300)
    with pytest.raises(ValueError, match="q4 payload of 300 values must be 264 bytes, got 164"):
        backend.decode_into(codecs.Q4, bytes(164), 300, out)
    with pytest.raises(ValueError, match="bf16 payload of 2 values must be 4 bytes, got 8"):
        codecs.BF16.decode_on(np, np.zeros(8, dtype=np.uint8), 2, np.empty(2, dtype=np.float32))


def test_decode_into_on_this_backend_matches_codecs_decode():
    x = np.linspace(-2, 3, 5000, dtype=np.float32)
    payload = codecs.Q4.encode(x)
    out = backend.empty(5000)
    backend.decode_into(codecs.Q4, payload, 5000, out)
    assert np.array_equal(backend.to_host(out), codecs.Q4.decode(payload, 5000))
