"""The syncer's memory model (schemas/syncer_memory.py) counts a q4 push kept encoded until the merge (the default on a
CPU head since d7084cb) at its encoded size, 0.5 B a value, not as an f32 row; a codec decoded into rows (bf16, f32)
still at 4 B. A real fragment taking q4 pushes holds them so: their bytes in `encoded`, the rows array's push rows never
written (zeroed pages, not resident)."""
from __future__ import annotations

import numpy as np
import pytest

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, sha256
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.syncer_memory import F32, kept_encoded, syncer_memory
from yeto.services.syncer.fragment import FragmentState

FP = "f" * 64


@pytest.mark.parametrize("learners", [2, 4, 6])
def test_kept_q4_pushes_are_counted_at_their_encoded_size(learners):
    values, fragments = 8 * 1_000_192, 8
    numel = values // fragments
    q4, f32 = (SyncConfig(num_fragments=fragments, codec_up=c) for c in ("q4", "f32"))
    assert kept_encoded("q4") and not kept_encoded("f32") and not kept_encoded("bf16")
    kept, rows = (syncer_memory(values, num_learners=learners, config=c) for c in (q4, f32))
    push = codecs.Q4.encoded_size(numel)
    resident = (3 * F32 * numel + learners * push) * fragments            # Θ, b, the shadow and the kept bytes
    assert kept.state == resident
    assert rows.state == (3 + learners) * F32 * numel * fragments
    assert rows.state - kept.state == learners * (F32 * numel - push) * fragments
    assert kept.process < rows.process


def test_a_fragment_holds_kept_q4_pushes_in_encoded_bytes_and_writes_no_push_row():
    n, config = 3000, SyncConfig(num_fragments=1, quorum=5)
    rng = np.random.default_rng(2)
    theta = rng.standard_normal(n).astype(np.float32)
    frag = FragmentState.adopt(FragmentHeader(run_id="t", fragment=0, kind="init", fingerprint=FP, codec="f32", numel=n,
                                              sha256=sha256(theta.tobytes())), theta, "t", config)
    for k, learner in enumerate("abcde"):                      # a fifth push grows `encoded`, not the rows array
        payload = codecs.Q4.encode(rng.standard_normal(n).astype(np.float32))
        h = FragmentHeader(run_id="t", learner=learner, fragment=0, fingerprint=FP, codec="q4", numel=n, c_tokens=10,
                           c_steps=8, local_step=8, sha256=sha256(payload))
        frag.add(h, float(k), frag.take_in(h, payload))
        assert frag.rows.encoded[k].tobytes() == payload
    assert frag.rows.kept == set(range(5))
    assert frag.rows.rows.shape[0] == 2 + 4 and not frag.rows.rows[2:].any(), "no push row written"
    assert frag.rows.encoded.shape == (5, codecs.Q4.encoded_size(n))
