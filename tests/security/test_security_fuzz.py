"""Hypothesis drives the chunk assembler and SyncerCore.receive with hostile headers, sizes and payloads under
a memory bound: the only outcomes are a payload, None, a typed FragmentError or LearnerRejected events; never
another exception, and never an allocation near what a header announces (tracemalloc's peak stays under a cap)."""
from __future__ import annotations

import json
import tracemalloc

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yeto.schemas import codecs
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import LearnerJoined, LearnerRejected, RoundMerged
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.outputs import Broadcast, SaveSnapshot
from yeto.services.syncer.roster import Roster
from yeto.services.syncer.rounds import WakeAt

RUN, FP, N = "r-fuzz", "f" * 64, 700
PEAK_CAP = 48 << 20            # the biggest honest message here is a few KiB; hostile ones announce up to 2**47 values
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HUGE = st.integers(min_value=0, max_value=1 << 66)
LEARNERS = st.sampled_from(["island-0", "island-1", "island-9", ""]) | st.text(max_size=12)

raw_fields = st.fixed_dictionaries({
    "run_id": st.sampled_from([RUN, "other", ""]), "learner": LEARNERS, "generation": HUGE | st.integers(-3, 3),
    "fragment": st.integers(-1, 3) | HUGE, "kind": st.sampled_from(["init", "push", "keyframe", "delta", "bogus"]),
    "fingerprint": st.sampled_from([FP, "", "0" * 64]), "codec": st.sampled_from(["f32", "bf16", "q4", "f64"]),
    "numel": st.integers(0, 1 << 47) | st.integers(-2, 2000), "base_version": st.integers(0, 8) | HUGE,
    "local_step": HUGE, "c_steps": HUGE, "c_tokens": HUGE | st.integers(-5, 5), "tokens_to": HUGE,
    "step_time_s": st.floats(allow_nan=True), "chunk": st.integers(0, 1 << 40) | st.integers(-1, 4),
    "num_chunks": st.integers(0, 1 << 40) | st.integers(1, 8), "chunk_bytes": st.integers(0, 1 << 30) | st.integers(1, 4096),
    "sha256": st.sampled_from(["", "0" * 64]), "chunk_sha256": st.sampled_from(["", "0" * 64, "use-data"]),
})


def header_of(fields: dict, data: bytes) -> FragmentHeader:
    """What the data plane does with a NATS header: parse, or FragmentError('bad_header')."""
    fields = {**fields, "chunk_sha256": sha256(data) if fields["chunk_sha256"] == "use-data" else fields["chunk_sha256"]}
    return FragmentHeader.from_nats({"Yeto-Fragment": json.dumps(fields, allow_nan=True)})


def bounded(fn):
    """Run fn under tracemalloc (only fn: tracing Hypothesis's own generation is slow) and assert its peak."""
    tracemalloc.start()
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_CAP, f"peak {peak >> 20} MiB"
    return result


def core() -> SyncerCore:
    c = SyncerCore(SyncConfig(quorum=2, grace_max_s=0.0), run_id=RUN,
                   roster=Roster({"island-0": 0, "island-1": 2}, {"island-0": 1, "island-1": 4}, tokens_per_step=512))
    init = np.linspace(-1, 1, N, dtype=np.float32)
    payload = codecs.F32.encode(init)
    h = FragmentHeader(run_id=RUN, learner="island-0", fragment=0, kind="init", fingerprint=FP, codec="f32", numel=N,
                       sha256=sha256(payload))
    for ch, c_ in split_chunks(h, payload, chunk_bytes=512):
        c.receive(ch, c_, 0.0, sender="island-0")
    assert 0 in c.fragments
    return c


ALLOWED = (LearnerRejected, LearnerJoined, RoundMerged, Broadcast, SaveSnapshot, WakeAt)
ALLOWED_EVENTS = {"GlobalVersionPublished", "RoundAborted"}


def check_outputs(outputs: list) -> None:
    for o in outputs:
        assert isinstance(o, ALLOWED) or getattr(o, "type", None) in ALLOWED_EVENTS, o


@SETTINGS
@given(chunks=st.lists(st.tuples(raw_fields, st.binary(max_size=4096)), min_size=1, max_size=12))
def test_the_assembler_only_returns_payloads_or_raises_fragment_errors(chunks):
    assembler = ChunkAssembler(max_pending_bytes=16 << 10, max_sender_bytes=8 << 10)

    def feed():
        for fields, data in chunks:
            try:
                h = header_of(fields, data)
                out = assembler.add(h, data)
                assert out is None or isinstance(out, bytes)
            except FragmentError as e:
                assert e.reason in ("bad_header", "too_large", "corrupt_chunk"), e
            assert assembler.pending_bytes <= 16 << 10 and len(assembler.pending) <= assembler.max_pending

    bounded(feed)


@SETTINGS
@given(chunks=st.lists(st.tuples(raw_fields, st.binary(max_size=4096), LEARNERS | st.none()), min_size=1, max_size=12))
def test_syncer_receive_answers_hostile_headers_with_typed_rejections_only(chunks):
    c = core()

    def feed():
        for fields, data, sender in chunks:
            try:
                h = header_of(fields, data)
            except FragmentError as e:
                assert e.reason == "bad_header"
                continue
            check_outputs(c.receive(h, data, 1.0, sender=sender))
        check_outputs(c.tick(10.0))

    bounded(feed)


@SETTINGS
@given(learner=st.sampled_from(["island-0", "island-1", "island-5"]), generation=st.integers(0, 3),
       spikes=st.lists(st.tuples(st.integers(0, N - 1), st.floats(width=32, allow_nan=True, allow_infinity=True)), max_size=6),
       scale=st.sampled_from([0.0, 1e-3, 1.0, 1e3, 3e38]), codec=st.sampled_from(["f32", "bf16", "q4"]),
       mutate=st.sampled_from(["none", "numel", "chunk_bytes", "drop", "swap", "truncate", "sha"]),
       counts=st.tuples(HUGE, st.integers(0, 64), st.integers(0, 3)), chunk_bytes=st.sampled_from([100, 512, 4096]))
def test_well_formed_but_hostile_pushes_are_merged_or_refused(learner, generation, spikes, scale, codec, mutate,
                                                            counts, chunk_bytes):
    c = core()
    x = np.full(N, scale, np.float32)
    for i, v in spikes:
        x[i] = v
    payload = codecs.codec(codec).encode(x)
    c_tokens, c_steps, base = counts
    h = FragmentHeader(run_id=RUN, learner=learner, generation=generation, fragment=0, fingerprint=FP, codec=codec, numel=N,
                       sha256=sha256(payload), c_tokens=c_tokens, c_steps=c_steps, base_version=base, local_step=5)
    chunks = split_chunks(h, payload, chunk_bytes=chunk_bytes)
    if mutate == "numel":
        chunks = [(ch.model_copy(update={"numel": ch.numel * 1000}), d) for ch, d in chunks]
    elif mutate == "chunk_bytes":
        chunks = [(ch.model_copy(update={"chunk_bytes": 1 << 22}), d) for ch, d in chunks]
    elif mutate == "drop":
        chunks = chunks[1:] or chunks
    elif mutate == "swap":
        chunks = chunks[::-1]
    elif mutate == "truncate":
        chunks = [(ch, d[:-1] or d) for ch, d in chunks]
    elif mutate == "sha":
        chunks = [(ch.model_copy(update={"sha256": "0" * 64}), d) for ch, d in chunks]

    def feed():
        out = [o for ch, d in chunks for o in c.receive(ch, d, 1.0, sender=learner)]
        check_outputs(out + c.tick(10.0))
        return out

    out = bounded(feed)
    if learner == "island-5" or generation > {"island-0": 0, "island-1": 2}.get(learner, -1):
        assert {o.reason for o in out if isinstance(o, LearnerRejected)} <= {"not_announced"}, "one event, on chunk 0"
        assert c.refused and not c.fragments[0].round.pending and not c.assembler.pending
