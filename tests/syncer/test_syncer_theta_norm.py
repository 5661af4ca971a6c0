"""Θ's norm for admission's bound, off the next round's first push (services/syncer/fragment.py `ThetaNorm`, 2026-12-06):
begun on a thread of its own once a version's broadcast chunks are out, the same value the first push took before
(sqrt of gram.sq_norm: the pieces' f32 dots added in order) on any thread count, and every push checked against the
norm of the version it is admitted into, never a stale one. Nobody begins it: the first push takes it, as before."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import admission, gram
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.fragment import ThetaNorm
from yeto.services.syncer.outputs import Broadcast, perform

FP = "f" * 64
N = 2 * gram.NORM_PIECE + 777                  # several of sq_norm's pieces, the last one short


class Sink:
    """Counts the broadcast's chunks and looks, at each one, whether Θ's norm was begun yet."""

    chunk_bytes = 1 << 16

    def __init__(self, core: SyncerCore) -> None:
        self.core, self.begun_at_a_chunk, self.chunks = core, [], 0

    def chunk(self, header, chunk) -> None:
        norm = self.core.fragments[0].norm
        self.begun_at_a_chunk.append(norm is not None and norm._started)
        self.chunks += 1

    def event(self, event) -> None:
        pass

    def snapshot(self, snap) -> None:
        pass

    def snapshot_later(self, snap) -> None:
        pass

    def wake(self, at) -> None:
        pass



def message(learner: str, kind: str, codec: str, payload: bytes, *, base: int) -> list[tuple[FragmentHeader, bytes]]:
    h = FragmentHeader(run_id="t", learner=learner, fragment=0, kind=kind, fingerprint=FP, codec=codec, numel=N,
                       c_tokens=100, c_steps=8, local_step=base + 1, base_version=base, sha256=sha256(payload))
    return split_chunks(h, payload, 1 << 16)


def started_core(rng: np.random.Generator) -> tuple[SyncerCore, Sink]:
    config = SyncConfig(num_fragments=1, quorum=2, keyframe_every=1 << 30, snapshot_every=1 << 30, max_push_norm_ratio=1e9)
    core = SyncerCore(config, run_id="t", fingerprint=FP)
    sink = Sink(core)
    payload = codecs.F32.encode(rng.standard_normal(N, dtype=np.float32))
    for learner in ("a", "b"):
        for h, c in message(learner, "init", "f32", payload, base=0):
            perform(core.receive(h, c, 0.0), sink)
    return core, sink


def push_round(core: SyncerCore, sink: Sink, rng: np.random.Generator) -> list:
    version = core.fragments[0].version
    outputs = []
    for learner in ("a", "b"):
        payload = codecs.Q4.encode(rng.standard_normal(N, dtype=np.float32) * np.float32(0.1))
        for h, c in message(learner, "push", "q4", payload, base=version):
            outputs += core.receive(h, c, 1.0)
    assert core.fragments[0].version == version + 1, "the round merged"
    return outputs


@pytest.mark.parametrize("count", [1, 2, 3])
def test_theta_s_norm_is_begun_once_the_broadcast_is_out_and_is_today_s_value_on_any_thread_count(kernel_threads, count):
    kernel_threads(count)
    rng = np.random.default_rng(count)
    core, sink = started_core(rng)
    for _ in range(2):
        outputs = push_round(core, sink, rng)
        broadcasts = [o for o in outputs if isinstance(o, Broadcast)]
        assert broadcasts[-1].then is not None and all(b.then is None for b in broadcasts[:-1])
        sink.begun_at_a_chunk.clear()
        perform(outputs, sink)
        frag = core.fragments[0]
        assert sink.chunks and not any(sink.begun_at_a_chunk), "begun after the chunks, not beside them"
        assert frag.norm is not None and frag.norm.version == frag.version and frag.norm._started
        frag.norm._done.wait()                  # on its own thread: done without any push asking for it
        assert frag.norm.value() == math.sqrt(gram.sq_norm(frag.theta))     # the same bits as the push took before
        for other in (1, 2, 3):
            kernel_threads(other)
            assert math.sqrt(gram.sq_norm(frag.theta)) == frag.norm.value()
        kernel_threads(count)


def test_every_push_is_checked_against_its_own_version_s_norm(kernel_threads, monkeypatch):
    kernel_threads(2)
    rng = np.random.default_rng(7)
    core, sink = started_core(rng)
    seen: list[tuple[int, float, float]] = []
    decoded = admission.decoded

    def looked(h, *, theta_norm, **kw):
        seen.append((h.base_version, theta_norm, math.sqrt(gram.sq_norm(core.fragments[0].theta))))
        return decoded(h, theta_norm=theta_norm, **kw)

    monkeypatch.setattr(admission, "decoded", looked)
    outputs = push_round(core, sink, rng)              # version 0's norm: begun after the init's keyframe went out
    perform(outputs, sink)
    perform(push_round(core, sink, rng), sink)         # version 1's: begun after version 1's chunks
    push_round(core, sink, rng)                        # version 2's: its outputs never performed, the first push takes it
    assert [v for v, _, _ in seen] == [0, 0, 1, 1, 2, 2]
    assert all(used == now for _, used, now in seen), "each push saw the norm of the Θ it is merged into"
    assert len({used for _, used, _ in seen}) == 3, "Θ moved every round, and so did the norm"


def test_a_norm_nobody_began_is_taken_on_the_asking_thread_once_and_a_failure_is_raised_to_it():
    calls: list[int] = []
    norm = ThetaNorm(3, lambda: calls.append(threading.get_ident()) or 2.5, background=True)
    norm.settle()                                      # never begun: nothing reads Θ, nothing to wait for
    assert norm.value() == 2.5 and norm.value() == 2.5 and calls == [threading.get_ident()]
    norm.start()                                       # already taken: no second thread, no second read
    assert calls == [threading.get_ident()]
    failing = ThetaNorm(4, lambda: 1 / 0, background=True)
    failing.start()
    failing.settle()
    with pytest.raises(RuntimeError, match="version 4"):
        failing.value()
