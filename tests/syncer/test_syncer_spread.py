"""The round's steps that ran on one thread whatever the kernel threads (codecs/base.py `spread`, 2026-12-06): the
broadcast's chunks copied and hashed, a push's join from its chunks and a kept push's copy, Θ's norm for admission.
On 1, 2 or 3 threads (or with spread off) they give the same bytes and bits, every call's result in order, and an
error raised in any of the threads comes out of the call once all are done."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.buffers import BufferPool, joined
from yeto.schemas.codecs import q4
from yeto.schemas.codecs.base import spread, spread_on
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import gram
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.fragment import FragmentState


@pytest.mark.parametrize("count", [1, 2, 3])
def test_spread_returns_every_result_in_order_on_at_most_the_kernel_threads(kernel_threads, count):
    kernel_threads(count)
    for size in (0, 1, 2, 5, 17):
        seen: dict[int, int] = {}
        got = spread(lambda x, seen=seen: seen.setdefault(x, threading.get_ident()) and x * x, range(size))
        assert got == [x * x for x in range(size)]
        assert len(set(seen.values())) <= count
        assert size == 0 or seen[0] == threading.get_ident(), "the calling thread takes the first run"
        if count > 1 and size > 1:
            assert seen[size - 1] != threading.get_ident(), "the last run on another thread"


def test_spread_off_calls_everything_on_the_calling_thread(kernel_threads):
    kernel_threads(3)
    spread_on(False)
    seen: set[int] = set()
    assert spread(lambda x: seen.add(threading.get_ident()) or -x, range(9)) == [-x for x in range(9)]
    assert seen == {threading.get_ident()}


def test_an_error_in_any_run_is_raised_once_every_run_is_done(kernel_threads):
    kernel_threads(2)
    done: list[int] = []

    def call(x: int) -> int:
        if x == 7:                       # in the second run, on the other thread
            raise ValueError("seven")
        done.append(x)
        return x

    with pytest.raises(ValueError, match="seven"):
        spread(call, range(10))
    assert sorted(done) == [0, 1, 2, 3, 4, 5, 6], "the first run whole and the second up to its error, then raised"


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_kept_push_and_a_join_copied_on_threads_are_the_bytes(kernel_threads, monkeypatch, count):
    kernel_threads(count)
    monkeypatch.setattr(q4, "_KEEP_PIECE", 1000)             # many pieces for a small payload, the last one short
    rng = np.random.default_rng(3)
    n = 10_000 + 77
    payload = codecs.Q4.encode(rng.standard_normal(n).astype(np.float32))
    out = np.zeros(codecs.Q4.encoded_size(n), dtype=np.uint8)
    codecs.Q4.keep(payload, n, out)
    assert out.tobytes() == payload
    with pytest.raises(ValueError):
        codecs.Q4.keep(payload[:-1], n, out)
    parts = [payload[i:i + 999] for i in range(0, len(payload), 999)]
    assert bytes(joined(parts, BufferPool(), spread)) == payload == bytes(joined(parts, BufferPool()))


def test_the_norm_of_theta_for_admission_is_the_same_on_any_thread_count(kernel_threads):
    rng = np.random.default_rng(4)
    n = 3 * gram.NORM_PIECE + 333                             # several pieces, the last one short
    theta = rng.standard_normal(n).astype(np.float32)
    norms = set()
    for count in (1, 2, 3):
        kernel_threads(count)
        norms.add(gram.sq_norm(theta))
    assert len(norms) == 1, "the pieces' sums added in order: the thread count does not change the bits"
    assert norms.pop() == pytest.approx(float(np.dot(theta.astype(np.float64), theta.astype(np.float64))), rel=1e-5)
    theta[12345] = np.nan
    assert math.isnan(gram.sq_norm(theta))


def test_the_core_takes_theta_s_norm_on_the_threads_and_numpy_s_with_spread_off(kernel_threads):
    n = 4096
    theta = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    config = SyncConfig(num_fragments=1)
    core = SyncerCore(config, run_id="t", fingerprint="f" * 64)
    h = FragmentHeader(run_id="t", learner="a", fragment=0, kind="init", fingerprint="f" * 64, codec="f32", numel=n,
                       sha256=sha256(codecs.F32.encode(theta)))
    frag = core.fragments[0] = FragmentState.adopt(h, theta, "t", config)
    kernel_threads(2)
    assert frag.theta_norm().value() == math.sqrt(gram.sq_norm(frag.theta))
    spread_on(False)
    frag.norm = None                           # a version's norm is taken once: ask again as a new version would
    assert frag.theta_norm().value() == float(np.linalg.norm(frag.theta))
    assert frag.norm_later() is None, "off the threads the first push takes it, as before"
